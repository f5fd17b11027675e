/* A bcryptprimitives.dll for Wine releases that lack one (Wine 8.0, Debian 12).
 *
 * Rust's standard library (1.78+) draws its random bytes (HashMap seeds) from
 * ProcessPrng, exported by bcryptprimitives.dll since Windows 10; without the export
 * the extension module fails to load. This DLL exports ProcessPrng over RtlGenRandom
 * (advapi32's SystemFunction036), which Wine has. `scripts/windows setup` builds it
 * with MinGW-w64 and puts it into the Wine prefix's system32, never onto Windows.
 */
#include <windows.h>
#include <ntsecapi.h>

BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
    /* RtlGenRandom takes a ULONG length: fill in pieces that fit. */
    while (len > 0) {
        ULONG piece = len > 0x10000000u ? 0x10000000u : (ULONG)len;
        if (!RtlGenRandom(data, piece))
            return FALSE;
        data += piece;
        len -= piece;
    }
    /* Windows documents that ProcessPrng always returns TRUE. */
    return TRUE;
}

BOOL WINAPI DllMain(HINSTANCE instance, DWORD reason, LPVOID reserved)
{
    (void)instance;
    (void)reason;
    (void)reserved;
    return TRUE;
}
