// Pins the CPython for Windows that `scripts/windows setup` runs under Wine: the
// windows-amd64 tree of go-embed-python's module (CPython 3.14.6, python.org's build).
// Nothing here is Go code: `go mod download -json` fetches the module through the Go
// module proxy and checks it against go.sum.
module rsloop.invalid/winepython

go 1.22

require github.com/kluctl/go-embed-python v0.0.0-3.14.6-20260610-1
