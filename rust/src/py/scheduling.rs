//! `call_soon`, `call_soon_threadsafe`, `call_later`, `call_at`, `create_task` and
//! `create_future` as Python sees them: methods installed by `ffi::fastcall`, which read
//! `(..., callback, *args, context=None)`, `(coro, *, name=None, context=None,
//! **kwargs)` and `()` from the vectorcall arguments (see there for why not PyO3's
//! parsing).
//! Owns: argument shapes and their `TypeError`s (PyO3's wording). Not: what the methods
//! do (`Loop::call_soon` & co. in `py/loop_.rs`).

use std::ffi::CStr;

use pyo3::exceptions::PyTypeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::futures::new_future;
use super::loop_::Loop;
use crate::ffi::fastcall::{install, FastArgs, FastMethod};
use crate::handles::{Args, TimerHandle};

/// Installs the six methods on the native loop type.
pub fn install_all(py: Python<'_>) -> PyResult<()> {
    install::<CallSoon>(py)?;
    install::<CallSoonThreadsafe>(py)?;
    install::<CallLater>(py)?;
    install::<CallAt>(py)?;
    install::<CreateTask>(py)?;
    install::<CreateFuture>(py)
}

/// The arguments of `method(names..., *args, context=None)`, where `names` are
/// positional-or-keyword and the last of them is the callback.
struct Parsed<'a, 'py, const N: usize> {
    fixed: [Borrowed<'a, 'py, PyAny>; N],
    args: Args,
    context: Option<Py<PyAny>>,
}

#[inline(always)]
fn parse<'a, 'py, const N: usize>(
    a: &FastArgs<'a, 'py>,
    method: &str,
    names: [&str; N],
) -> PyResult<Parsed<'a, 'py, N>> {
    // The shapes every caller uses: all fixed arguments by position, and no keyword or
    // only `context=`. Python code passes that name interned; C Futures and Tasks pass
    // their own string (3.10/3.11 build it with `Py_BuildValue`), compared by text.
    if a.nargs() >= N {
        let context = match a.n_keywords() {
            0 => None,
            1 if a
                .keyword(0)
                .is_ok_and(|k| k.is(intern!(a.py(), "context")) || k == "context") =>
            {
                Some(a.value(a.nargs()))
            }
            _ => return parse_slow(a, method, names),
        };
        return Ok(Parsed {
            fixed: std::array::from_fn(|i| a.value(i)),
            args: args_from(a, N)?,
            context: context
                .filter(|c| !c.is_none())
                .map(|c| c.to_owned().unbind()),
        });
    }
    parse_slow(a, method, names)
}

/// The positional arguments from `start` on: one is kept as it is (no tuple).
#[inline(always)]
fn args_from(a: &FastArgs<'_, '_>, start: usize) -> PyResult<Args> {
    Ok(match a.nargs().saturating_sub(start) {
        0 => Args::Zero,
        1 => Args::One(a.value(start).to_owned().unbind()),
        _ => Args::Many(a.tuple_from(start)?.unbind()),
    })
}

#[cold]
fn parse_slow<'a, 'py, const N: usize>(
    a: &FastArgs<'a, 'py>,
    method: &str,
    names: [&str; N],
) -> PyResult<Parsed<'a, 'py, N>> {
    let mut fixed: [Option<Borrowed<'a, 'py, PyAny>>; N] = [None; N];
    for (i, slot) in fixed.iter_mut().enumerate().take(a.nargs()) {
        *slot = Some(a.value(i));
    }
    let mut context = None;
    for k in 0..a.n_keywords() {
        let name = a.keyword(k)?;
        let value = a.value(a.nargs() + k);
        if name == "context" {
            context = Some(value);
            continue;
        }
        let Some(i) = names.iter().position(|n| name == *n) else {
            return Err(PyTypeError::new_err(format!(
                "Loop.{method}() got an unexpected keyword argument '{name}'"
            )));
        };
        if fixed[i].replace(value).is_some() {
            return Err(PyTypeError::new_err(format!(
                "Loop.{method}() got multiple values for argument '{}'",
                names[i]
            )));
        }
    }
    let missing: Vec<String> = (0..N)
        .filter(|&i| fixed[i].is_none())
        .map(|i| format!("'{}'", names[i]))
        .collect();
    if !missing.is_empty() {
        return Err(missing_arguments(method, &missing));
    }
    Ok(Parsed {
        fixed: fixed.map(|v| v.expect("checked above")),
        args: args_from(a, N)?,
        context: context
            .filter(|c| !c.is_none())
            .map(|c| c.to_owned().unbind()),
    })
}

// "missing 2 required positional arguments: 'delay' and 'callback'", as Python says it.
fn missing_arguments(method: &str, missing: &[String]) -> PyErr {
    let (count, list) = match missing {
        [one] => ("1 required positional argument".to_string(), one.clone()),
        [rest @ .., last] => (
            format!("{} required positional arguments", missing.len()),
            format!("{} and {last}", rest.join(", ")),
        ),
        [] => unreachable!("called with something missing"),
    };
    PyTypeError::new_err(format!("Loop.{method}() missing {count}: {list}"))
}

/// The part every method here shares: it is the native loop's, and on the thread running
/// the loop a call comes from inside `Loop._run_forever_native`, a PyO3 method, so PyO3
/// already counts the thread as attached.
macro_rules! loop_method {
    () => {
        type Class = Loop;

        #[inline(always)]
        fn skip_attach_count(slf: &Bound<'_, Loop>) -> bool {
            slf.get().on_loop_thread()
        }
    };
}

/// `Loop::call_later` or `Loop::call_at`: a time, then the callback and its arguments.
type TimerMethod = for<'py> fn(
    &Bound<'py, Loop>,
    Python<'py>,
    &Bound<'py, PyAny>,
    Py<PyAny>,
    Args,
    Option<Py<PyAny>>,
) -> PyResult<Py<TimerHandle>>;

#[inline(always)]
fn schedule_timer<'py>(
    slf: &Bound<'py, Loop>,
    a: &FastArgs<'_, 'py>,
    method: &str,
    time_name: &str,
    schedule: TimerMethod,
) -> PyResult<Bound<'py, PyAny>> {
    let p = parse(a, method, [time_name, "callback"])?;
    let [time, callback] = p.fixed;
    let py = slf.py();
    schedule(
        slf,
        py,
        &time,
        callback.to_owned().unbind(),
        p.args,
        p.context,
    )
    .map(|h| h.into_bound(py).into_any())
}

/// `call_soon(callback, *args, context=None)`.
pub struct CallSoon;

impl FastMethod for CallSoon {
    const NAME: &'static CStr = c"call_soon";
    const DOC: &'static CStr = c"call_soon($self, callback, *args, context=None)\n--\n\n\
Arrange for a callback to be called as soon as possible.";

    loop_method!();

    fn call<'py>(slf: &Bound<'py, Loop>, a: &FastArgs<'_, 'py>) -> PyResult<Bound<'py, PyAny>> {
        let p = parse(a, "call_soon", ["callback"])?;
        let [callback] = p.fixed;
        let py = slf.py();
        slf.get()
            .call_soon(py, callback.to_owned().unbind(), p.args, p.context)
            .map(|h| h.into_bound(py).into_any())
    }
}

/// `call_soon_threadsafe(callback, *args, context=None)`.
pub struct CallSoonThreadsafe;

impl FastMethod for CallSoonThreadsafe {
    const NAME: &'static CStr = c"call_soon_threadsafe";
    const DOC: &'static CStr =
        c"call_soon_threadsafe($self, callback, *args, context=None)\n--\n\n\
Like call_soon(), but safe to call from another thread.";

    type Class = Loop;

    // Skipped off the loop's thread too, where the producers of cross-thread callbacks
    // run: once the arguments are parsed, every object moves into the handle and the
    // handle into the queue, so nothing is dropped; what an error (a closed loop) drops
    // is released when the error is raised, attached (`ffi::fastcall`). Raising the count
    // took an eighth of the time of a post from a thread PyO3 had not seen.
    #[inline(always)]
    fn skip_attach_count(_slf: &Bound<'_, Loop>) -> bool {
        true
    }

    fn call<'py>(slf: &Bound<'py, Loop>, a: &FastArgs<'_, 'py>) -> PyResult<Bound<'py, PyAny>> {
        let p = parse(a, "call_soon_threadsafe", ["callback"])?;
        let [callback] = p.fixed;
        slf.get()
            .call_soon_threadsafe(slf.py(), callback.to_owned().unbind(), p.args, p.context)
            .map(|h| h.into_bound(slf.py()).into_any())
    }
}

/// `call_later(delay, callback, *args, context=None)`.
pub struct CallLater;

impl FastMethod for CallLater {
    const NAME: &'static CStr = c"call_later";
    const DOC: &'static CStr = c"call_later($self, delay, callback, *args, context=None)\n--\n\n\
Arrange for a callback to be called at a given time.";

    loop_method!();

    fn call<'py>(slf: &Bound<'py, Loop>, a: &FastArgs<'_, 'py>) -> PyResult<Bound<'py, PyAny>> {
        schedule_timer(slf, a, "call_later", "delay", Loop::call_later)
    }
}

/// `call_at(when, callback, *args, context=None)`.
pub struct CallAt;

impl FastMethod for CallAt {
    const NAME: &'static CStr = c"call_at";
    const DOC: &'static CStr = c"call_at($self, when, callback, *args, context=None)\n--\n\n\
Like call_later(), but uses an absolute time.";

    loop_method!();

    fn call<'py>(slf: &Bound<'py, Loop>, a: &FastArgs<'_, 'py>) -> PyResult<Bound<'py, PyAny>> {
        schedule_timer(slf, a, "call_at", "when", Loop::call_at)
    }
}

/// `create_task(coro, *, name=None, context=None, **kwargs)`.
pub struct CreateTask;

impl FastMethod for CreateTask {
    const NAME: &'static CStr = c"create_task";
    const DOC: &'static CStr =
        c"create_task($self, coro, *, name=None, context=None, **kwargs)\n--\n\n\
Schedule a coroutine object.";

    loop_method!();

    fn call<'py>(slf: &Bound<'py, Loop>, a: &FastArgs<'_, 'py>) -> PyResult<Bound<'py, PyAny>> {
        if a.nargs() == 1 && a.n_keywords() == 0 {
            return Loop::create_task(slf, &a.value(0), None, None, None);
        }
        create_task_keywords(slf, a)
    }
}

// `create_task` called with keywords (`asyncio.TaskGroup` passes `name=` and `context=`)
// or with the wrong shape.
fn create_task_keywords<'py>(
    slf: &Bound<'py, Loop>,
    a: &FastArgs<'_, 'py>,
) -> PyResult<Bound<'py, PyAny>> {
    if a.nargs() > 1 {
        return Err(PyTypeError::new_err(format!(
            "Loop.create_task() takes 1 positional arguments but {} were given",
            a.nargs()
        )));
    }
    let mut coro = (a.nargs() == 1).then(|| a.value(0));
    let (mut name, mut context) = (None, None);
    let mut kwargs: Option<Bound<'py, PyDict>> = None;
    for k in 0..a.n_keywords() {
        let key = a.keyword(k)?;
        let value = a.value(a.nargs() + k);
        if key == "name" {
            name = Some(value);
        } else if key == "context" {
            context = Some(value);
        } else if key == "coro" {
            if coro.replace(value).is_some() {
                return Err(PyTypeError::new_err(
                    "Loop.create_task() got multiple values for argument 'coro'",
                ));
            }
        } else {
            kwargs
                .get_or_insert_with(|| PyDict::new(a.py()))
                .set_item(key, value)?;
        }
    }
    let Some(coro) = coro else {
        return Err(missing_arguments("create_task", &["'coro'".to_string()]));
    };
    Loop::create_task(
        slf,
        &coro,
        name.as_deref(),
        context.as_deref(),
        kwargs.as_ref(),
    )
}

/// `create_future()`: asyncio's own `sleep`, locks, queues and stream waits call it.
pub struct CreateFuture;

impl FastMethod for CreateFuture {
    const NAME: &'static CStr = c"create_future";
    const DOC: &'static CStr = c"create_future($self)\n--\n\n\
Create a Future object attached to the loop.";

    loop_method!();

    fn call<'py>(slf: &Bound<'py, Loop>, a: &FastArgs<'_, 'py>) -> PyResult<Bound<'py, PyAny>> {
        // CPython's words for a METH_NOARGS method, which this was.
        if a.n_keywords() != 0 {
            return Err(PyTypeError::new_err(
                "Loop.create_future() takes no keyword arguments",
            ));
        }
        if a.nargs() != 0 {
            return Err(PyTypeError::new_err(format!(
                "Loop.create_future() takes no arguments ({} given)",
                a.nargs()
            )));
        }
        new_future(slf)
    }
}
