//! `rsloop._rsloop.HttpRequestParser` and the response-head helpers behind `rsloop.http`
//! (the protocol itself is Python: `rsloop/http.py`). One `feed` per read turns the bytes
//! into a list of events, so a request costs one call into Rust, not one per header.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use pyo3::PyTraverseError;

use crate::http::request::{Head, ParseError, RequestParser, Sink};
use crate::http::response::{self, HeadWriter};

/// Event kinds in `HttpRequestParser.feed`'s list.
const HEAD: u8 = 0;
const BODY: u8 = 1;
const COMPLETE: u8 = 2;
const UPGRADED: u8 = 3;
const ERROR: u8 = 4;
/// A head (as scope) whose request is already whole, without a body: `HEAD` and
/// `COMPLETE` in one event.
const WHOLE: u8 = 5;

/// An HTTP/1.x request parser.
///
/// `feed(data)` returns the events `data` completes, in order:
/// `(0, method, path, query, http_version, headers, keep_alive, expect_continue, upgrade)`
/// for a head (`headers` a list of `(name, value)` bytes pairs, names lowercased;
/// `upgrade` the `Upgrade` value when `Connection` names it, else `None`);
/// `(1, body)`; `(2,)` when a request ends; `(3, rest)` for bytes after the head of a
/// websocket upgrade, when `upgrade_websocket` was true (the parser reads nothing after).
/// A malformed or ambiguous request ends the list with `(4, why)`, after the events of
/// what came before it (a good request pipelined ahead of a bad one is still served), and
/// every later call returns `[(4, why)]`.
///
/// After `set_scope(base)`, a head is `(0, scope, keep_alive, expect_continue, upgrade)`
/// instead: `scope` the ASGI HTTP scope, a copy of `base` (the connection's keys:
/// `type`, `asgi`, `server`, `client`, `scheme`, `root_path`, `state`; a dict among them
/// is copied too) with the request's `http_version`, `headers`, `method`, `path` (percent
/// decoded as `urllib.parse.unquote` decodes it, after `root_path`), `raw_path` (after
/// `root_path`) and `query_string`; `keep_alive` false for HTTP/1.0. A request without a
/// body that `data` completes, not an upgrade, is then one event
/// `(5, scope, keep_alive, expect_continue, None)`: its head and its end.
#[pyclass(module = "rsloop._rsloop", name = "HttpRequestParser")]
pub struct HttpRequestParser {
    parser: RequestParser,
    upgrade_websocket: bool,
    scope: Option<ScopeBase>,
}

/// What `set_scope` gave: the connection's part of every request's scope.
struct ScopeBase {
    base: Py<PyDict>,
    /// The items of `base` whose values are dicts (`asgi`, `state`): copied per request.
    dicts: Vec<(Py<PyAny>, Py<PyDict>)>,
    root_path: String,
}

#[pymethods]
impl HttpRequestParser {
    #[new]
    #[pyo3(signature = (max_head, upgrade_websocket))]
    fn new(max_head: usize, upgrade_websocket: bool) -> Self {
        HttpRequestParser {
            parser: RequestParser::new(max_head),
            upgrade_websocket,
            scope: None,
        }
    }

    /// Heads come as ASGI scopes from now on, each a copy of `base` with the request's
    /// keys (see the class). `base["root_path"]`, a str, goes before each path; a dict
    /// in `base` (`asgi`, `state`) is copied for each request.
    fn set_scope(&mut self, base: &Bound<'_, PyDict>) -> PyResult<()> {
        let py = base.py();
        let root_path = match base.get_item(pyo3::intern!(py, "root_path"))? {
            Some(root) => root.extract::<String>()?,
            None => String::new(),
        };
        let mut dicts = Vec::new();
        for (key, value) in base.iter() {
            if let Ok(dict) = value.cast_into::<PyDict>() {
                dicts.push((key.unbind(), dict.unbind()));
            }
        }
        // The request's keys are in the base from the start (None until a request sets
        // them): each request's copy then has the room for them, and setting one
        // replaces a value instead of growing the dict.
        let template = base.copy()?;
        for key in REQUEST_KEYS {
            if !template.contains(key)? {
                template.set_item(key, py.None())?;
            }
        }
        self.scope = Some(ScopeBase {
            base: template.unbind(),
            dicts,
            root_path,
        });
        Ok(())
    }

    fn feed<'py>(&mut self, py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyList>> {
        let mut sink = PySink {
            py,
            events: PyList::empty(py),
            pending: None,
            error: None,
            upgrade_websocket: self.upgrade_websocket,
            scope: self.scope.as_ref(),
        };
        let parsed = self.parser.feed(data, &mut sink);
        sink.flush_head(HEAD);
        if let Err(err) = parsed {
            let why: ParseError = err;
            let event = (ERROR, why.to_string()).into_pyobject(py);
            sink.push(event);
        }
        match sink.error {
            Some(err) => Err(err),
            None => Ok(sink.events),
        }
    }

    /// The scope base may hold the app's `state` dict, whose values can lead back to the
    /// protocol that owns this parser: a cycle the collector must see.
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Some(scope) = &self.scope {
            visit.call(&scope.base)?;
            for (key, dict) in &scope.dicts {
                visit.call(key)?;
                visit.call(dict)?;
            }
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        self.scope = None;
    }

    /// Bytes held of a head, chunk line or trailer not yet whole.
    #[getter]
    fn buffered(&self) -> usize {
        self.parser.buffered()
    }

    /// True between requests with nothing of the next one read.
    #[getter]
    fn idle(&self) -> bool {
        self.parser.is_idle()
    }
}

struct PySink<'py, 'a> {
    py: Python<'py>,
    events: Bound<'py, PyList>,
    /// The scope-mode head just read, held back in case its request ends at once
    /// (`WHOLE`): `(scope, keep_alive, expect_continue)`.
    pending: Option<(Bound<'py, PyDict>, bool, bool)>,
    error: Option<PyErr>,
    upgrade_websocket: bool,
    scope: Option<&'a ScopeBase>,
}

static UNQUOTE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// `path` (ASCII: the parser refuses other bytes in a target) as the scope's `path`:
/// after `root`, and percent-decoded by `urllib.parse.unquote` when it has a `%`.
fn scope_path<'py>(py: Python<'py>, root: &str, path: &[u8]) -> PyResult<Bound<'py, PyString>> {
    let text =
        std::str::from_utf8(path).map_err(|_| PyValueError::new_err("non-ASCII request target"))?;
    if !text.contains('%') {
        if root.is_empty() {
            return Ok(PyString::new(py, text));
        }
        return Ok(PyString::new(py, &format!("{root}{text}")));
    }
    let unquote = UNQUOTE.get_or_try_init(py, || {
        Ok::<_, PyErr>(py.import("urllib.parse")?.getattr("unquote")?.unbind())
    })?;
    let decoded = unquote.bind(py).call1((text,))?.cast_into::<PyString>()?;
    if root.is_empty() {
        return Ok(decoded);
    }
    Ok(PyString::new(py, &format!("{root}{}", decoded.to_cow()?)))
}

/// The scope's keys each request sets.
const REQUEST_KEYS: [&str; 6] = [
    "http_version",
    "method",
    "path",
    "raw_path",
    "query_string",
    "headers",
];

/// `method` as a str: the common ones shared, as interned strings.
fn method_str<'py>(py: Python<'py>, method: &str) -> Bound<'py, PyString> {
    use pyo3::intern;
    match method {
        "GET" => intern!(py, "GET").clone(),
        "POST" => intern!(py, "POST").clone(),
        "HEAD" => intern!(py, "HEAD").clone(),
        "PUT" => intern!(py, "PUT").clone(),
        "DELETE" => intern!(py, "DELETE").clone(),
        "PATCH" => intern!(py, "PATCH").clone(),
        "OPTIONS" => intern!(py, "OPTIONS").clone(),
        _ => PyString::new(py, method),
    }
}

/// Header names most requests carry, lowercased: one bytes object each, shared by every
/// request (bytes are immutable) instead of one per header per request.
const COMMON_NAMES: [&[u8]; 16] = [
    b"host",
    b"user-agent",
    b"accept",
    b"accept-encoding",
    b"accept-language",
    b"connection",
    b"content-type",
    b"content-length",
    b"cookie",
    b"referer",
    b"origin",
    b"cache-control",
    b"authorization",
    b"x-forwarded-for",
    b"x-forwarded-proto",
    b"x-request-id",
];

static COMMON_NAME_OBJECTS: PyOnceLock<Vec<Py<PyBytes>>> = PyOnceLock::new();

/// `lower` (a lowercased header name) as bytes: a shared object for a common name.
fn name_bytes<'py>(py: Python<'py>, lower: &[u8]) -> Bound<'py, PyBytes> {
    if let Some(i) = COMMON_NAMES.iter().position(|n| *n == lower) {
        let names = COMMON_NAME_OBJECTS.get_or_init(py, || {
            COMMON_NAMES
                .iter()
                .map(|n| PyBytes::new(py, n).unbind())
                .collect()
        });
        return names[i].bind(py).clone();
    }
    PyBytes::new(py, lower)
}

/// The ASGI scope of `head` (see `HttpRequestParser`).
fn build_scope<'py>(
    py: Python<'py>,
    base: &ScopeBase,
    head: &Head<'_>,
    headers: Bound<'py, PyList>,
    version: &Bound<'py, PyString>,
) -> PyResult<Bound<'py, PyDict>> {
    use pyo3::intern;
    let scope = base.base.bind(py).copy()?;
    for (key, dict) in &base.dicts {
        scope.set_item(key.bind(py), dict.bind(py).copy()?)?;
    }
    scope.set_item(intern!(py, "http_version"), version)?;
    scope.set_item(intern!(py, "headers"), headers)?;
    scope.set_item(intern!(py, "method"), method_str(py, head.method))?;
    scope.set_item(
        intern!(py, "path"),
        scope_path(py, &base.root_path, head.path)?,
    )?;
    let raw_path = if base.root_path.is_empty() {
        PyBytes::new(py, head.path)
    } else {
        let mut raw = Vec::with_capacity(base.root_path.len() + head.path.len());
        raw.extend_from_slice(base.root_path.as_bytes());
        raw.extend_from_slice(head.path);
        PyBytes::new(py, &raw)
    };
    scope.set_item(intern!(py, "raw_path"), raw_path)?;
    scope.set_item(intern!(py, "query_string"), PyBytes::new(py, head.query))?;
    Ok(scope)
}

impl PySink<'_, '_> {
    /// Pushes the held-back head, as `kind` (`HEAD`, or `WHOLE` when its request ended).
    fn flush_head(&mut self, kind: u8) {
        if let Some((scope, keep_alive, expect_continue)) = self.pending.take() {
            let py = self.py;
            let event = (kind, scope, keep_alive, expect_continue, py.None()).into_pyobject(py);
            self.push(event);
        }
    }

    fn push(&mut self, event: PyResult<Bound<'_, PyTuple>>) {
        if self.error.is_some() {
            return;
        }
        if let Err(err) = event.and_then(|e| self.events.append(e)) {
            self.error = Some(err);
        }
    }
}

impl Sink for PySink<'_, '_> {
    fn head(&mut self, head: &Head<'_>) -> bool {
        let py = self.py;
        let event = (|| {
            let headers = PyList::empty(py);
            let mut lower = Vec::with_capacity(32);
            for header in head.headers {
                lower.clear();
                lower.extend(header.name.bytes().map(|b| b.to_ascii_lowercase()));
                headers.append((name_bytes(py, &lower), PyBytes::new(py, header.value)))?;
            }
            let version = if head.minor_version == 0 {
                pyo3::intern!(py, "1.0")
            } else {
                pyo3::intern!(py, "1.1")
            };
            let upgrade = head.upgrade.map(|u| PyBytes::new(py, u));
            if let Some(base) = self.scope {
                let scope = build_scope(py, base, head, headers, version)?;
                let keep_alive = head.keep_alive && head.minor_version != 0;
                if upgrade.is_none() {
                    return Ok(Err((scope, keep_alive, head.expect_continue)));
                }
                return (
                    HEAD,
                    scope,
                    head.keep_alive && head.minor_version != 0,
                    head.expect_continue,
                    upgrade,
                )
                    .into_pyobject(py)
                    .map(Ok);
            }
            (
                HEAD,
                PyString::new(py, head.method),
                PyBytes::new(py, head.path),
                PyBytes::new(py, head.query),
                version,
                headers,
                head.keep_alive,
                head.expect_continue,
                upgrade,
            )
                .into_pyobject(py)
                .map(Ok)
        })();
        match event {
            Ok(Err(pending)) => self.pending = Some(pending),
            Ok(Ok(event)) => self.push(Ok(event)),
            Err(err) => self.push(Err(err)),
        }
        self.upgrade_websocket
            && head
                .upgrade
                .is_some_and(|u| u.eq_ignore_ascii_case(b"websocket"))
    }

    fn body(&mut self, chunk: &[u8]) {
        self.flush_head(HEAD);
        let event = (BODY, PyBytes::new(self.py, chunk)).into_pyobject(self.py);
        self.push(event);
    }

    fn complete(&mut self) {
        if self.pending.is_some() {
            return self.flush_head(WHOLE);
        }
        let event = (COMPLETE,).into_pyobject(self.py);
        self.push(event);
    }

    fn upgraded(&mut self, rest: &[u8]) {
        self.flush_head(HEAD);
        let event = (UPGRADED, PyBytes::new(self.py, rest)).into_pyobject(self.py);
        self.push(event);
    }
}

/// The bytes of one `(name, value)` item of an ASGI header list: a pair (a tuple, or
/// any sequence of two, as some applications build lists) of bytes-likes. Not a pair:
/// `ValueError`, as uvicorn's unpacking raises; not bytes: `TypeError`.
fn header_pair(item: &Bound<'_, PyAny>) -> PyResult<(PyBackedBytes, PyBackedBytes)> {
    let (name, value) = match item.cast::<PyTuple>() {
        Ok(t) if t.len() == 2 => (t.get_item(0)?, t.get_item(1)?),
        _ => {
            if item.len()? != 2 {
                return Err(PyValueError::new_err(
                    "each ASGI header must be a (name, value) pair",
                ));
            }
            (item.get_item(0)?, item.get_item(1)?)
        }
    };
    let bytes = |x: Bound<'_, PyAny>| {
        x.extract::<PyBackedBytes>().map_err(|_| {
            PyTypeError::new_err(format!(
                "ASGI header names and values must be bytes, not {}",
                x.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        })
    };
    Ok((bytes(name)?, bytes(value)?))
}

/// A `content-length` value that is not plain digits, read as uvicorn reads it:
/// `int(value.decode())` (its `ValueError` as it is). A negative number is refused too.
fn python_length(py: Python<'_>, value: &[u8]) -> PyResult<u64> {
    let text = PyBytes::new(py, value).call_method0(pyo3::intern!(py, "decode"))?;
    let number = py.get_type::<pyo3::types::PyInt>().call1((text,))?;
    number.extract::<u64>().map_err(|_| {
        PyValueError::new_err(format!(
            "content-length must be a number of bytes, not {number}"
        ))
    })
}

/// `response_head(status_line, default_headers, headers, is_head, status, keep_alive)`:
/// the response head as bytes, and `(chunked, content_length, keep_alive)` for the body
/// after it. Raises `RuntimeError` with uvicorn's message for a header name or value it
/// refuses, `ValueError` for a content-length that is not a number.
#[pyfunction]
#[pyo3(signature = (status_line, default_headers, headers, is_head, status, keep_alive))]
pub fn response_head<'py>(
    py: Python<'py>,
    status_line: &[u8],
    default_headers: &Bound<'py, PyAny>,
    headers: &Bound<'py, PyAny>,
    is_head: bool,
    status: u16,
    keep_alive: bool,
) -> PyResult<(Bound<'py, PyBytes>, bool, u64, bool)> {
    let mut out = Vec::with_capacity(256);
    let framing = write_head(
        py,
        &mut out,
        status_line,
        [default_headers, headers],
        is_head,
        status,
        keep_alive,
    )?;
    Ok((
        PyBytes::new(py, &out),
        framing.chunked,
        framing.content_length,
        framing.keep_alive,
    ))
}

/// The head `response_head` returns, written into `out`. `lists[0]` is the server's
/// default headers (uvicorn's `server_state.default_headers`, a new list each second):
/// their lines are kept from the last head written with the same list of the same items.
pub(super) fn write_head(
    py: Python<'_>,
    out: &mut Vec<u8>,
    status_line: &[u8],
    lists: [&Bound<'_, PyAny>; 2],
    is_head: bool,
    status: u16,
    keep_alive: bool,
) -> PyResult<response::Framing> {
    let mut writer = HeadWriter::new(out, status_line, keep_alive);
    let [defaults, headers] = lists;
    if !DEFAULT_LINES.with(defaults, &mut writer) {
        write_headers(py, &mut writer, defaults)?;
    }
    write_headers(py, &mut writer, headers)?;
    Ok(writer.finish(is_head, status))
}

fn write_headers(
    py: Python<'_>,
    writer: &mut HeadWriter<'_>,
    list: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let refused =
        |err: response::HeadError| pyo3::exceptions::PyRuntimeError::new_err(err.message());
    for item in list.try_iter()? {
        let item = item?;
        // The common item: a tuple of two bytes, read in place.
        if let Ok(pair) = item.cast::<PyTuple>() {
            if pair.len() == 2 {
                let name = pair.get_borrowed_item(0)?;
                let value = pair.get_borrowed_item(1)?;
                if let (Ok(name), Ok(value)) = (name.cast::<PyBytes>(), value.cast::<PyBytes>()) {
                    let (name, value) = (name.as_bytes(), value.as_bytes());
                    if !name.eq_ignore_ascii_case(b"content-length")
                        || response::decimal(value).is_some()
                    {
                        writer.header(name, value).map_err(refused)?;
                        continue;
                    }
                }
            }
        }
        let (name, value) = header_pair(&item)?;
        let length = if name.eq_ignore_ascii_case(b"content-length")
            && response::decimal(&value).is_none()
        {
            Some(python_length(py, &value)?)
        } else {
            None
        };
        writer
            .header_with_length(&name, &value, length)
            .map_err(refused)?;
    }
    Ok(())
}

/// The lines of the last default-header list written, by the identity of the list and
/// of its items (tuples, held here so that an address is not reused while compared).
struct DefaultLines {
    last: std::sync::Mutex<Option<Kept>>,
}

struct Kept {
    list: Py<PyAny>,
    items: Vec<Py<PyAny>>,
    lines: Vec<u8>,
}

static DEFAULT_LINES: DefaultLines = DefaultLines {
    last: std::sync::Mutex::new(None),
};

impl DefaultLines {
    /// Writes `defaults`' lines from the copy kept, or from a new copy when the list is
    /// a list of `(bytes, bytes)` tuples framing nothing; false (nothing written) if not.
    fn with(&self, defaults: &Bound<'_, PyAny>, writer: &mut HeadWriter<'_>) -> bool {
        let Ok(list) = defaults.cast_exact::<PyList>() else {
            return false;
        };
        let Ok(mut last) = self.last.lock() else {
            return false;
        };
        if let Some(kept) = last.as_ref() {
            if kept.list.is(defaults)
                && kept.items.len() == list.len()
                && kept.items.iter().zip(list.iter()).all(|(a, b)| a.is(&b))
            {
                writer.raw(&kept.lines);
                return true;
            }
        }
        let mut items = Vec::with_capacity(list.len());
        let mut pairs = Vec::with_capacity(list.len());
        for item in list.iter() {
            let Ok(pair) = item.cast::<PyTuple>() else {
                return false;
            };
            if pair.len() != 2 {
                return false;
            }
            let (Ok(name), Ok(value)) = (
                pair.get_item(0).and_then(|n| Ok(n.cast_into::<PyBytes>()?)),
                pair.get_item(1).and_then(|v| Ok(v.cast_into::<PyBytes>()?)),
            ) else {
                return false;
            };
            pairs.push((name, value));
            items.push(item.unbind());
        }
        let Some(lines) =
            response::plain_lines(pairs.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())))
        else {
            return false;
        };
        writer.raw(&lines);
        let old = last.replace(Kept {
            list: defaults.clone().unbind(),
            items,
            lines,
        });
        drop(last);
        drop(old); // outside the lock: freeing it is the interpreter's business
        true
    }
}

/// `chunk(data, last)`: `data` (bytes, or any bytes-like: Starlette streams memoryviews)
/// as one chunk of a chunked body, and the last chunk after it when `last`.
#[pyfunction]
pub fn chunk<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyAny>,
    last: bool,
) -> PyResult<Bound<'py, PyBytes>> {
    let write = |bytes: &[u8]| {
        let mut out = Vec::with_capacity(bytes.len() + 24);
        response::write_chunk(&mut out, bytes, last);
        PyBytes::new(py, &out)
    };
    if let Ok(b) = data.cast::<PyBytes>() {
        return Ok(write(b.as_bytes()));
    }
    let buffer = pyo3::buffer::PyBuffer::<u8>::get(data)?;
    Ok(write(&buffer.to_vec(py)?))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<HttpRequestParser>()?;
    m.add_function(wrap_pyfunction!(response_head, m)?)?;
    m.add_function(wrap_pyfunction!(chunk, m)?)?;
    super::http_cycle::register(m)?;
    Ok(())
}
