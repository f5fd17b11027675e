//! The loop's driver: which backend a loop will get, creating its driver on the thread
//! that runs it, and replacing it after a fork or a move to another thread.
//! Owns: driver (re)creation and what carries over (re-arming, connections an old ring
//! accepted). Not: using the driver in an iteration (`run.rs`), the drivers (`driver/`).

use pyo3::prelude::*;

use super::{BackendInfo, LoopCore};
use crate::driver::{self, Completion, Requested};
use crate::handles::lock;

impl LoopCore {
    /// Creates the driver on the calling (running) thread if there is none yet, or replaces
    /// one inherited from a parent process.
    pub fn ensure_driver(&self, py: Python<'_>) -> PyResult<()> {
        let mut slot = lock(&self.driver);
        if let Some(d) = slot.as_ref() {
            if !d.needs_replacing() {
                return Ok(());
            }
        }
        let mut accepted = Vec::new();
        if let Some(mut old) = slot.take() {
            if old.is_inherited() {
                old.abandon();
            } else {
                // The loop moved to another thread: close the old ring (its requests are
                // cancelled) and arm everything again from this one. Connections the old
                // ring accepted meanwhile still go to their servers.
                accepted = old.retire();
                drop(old);
            }
            self.queues.with(py, |q| {
                q.watchers.rearm_all();
                q.streams.rearm_all();
            });
        }
        self.deliver_accepted(py, accepted)?;
        let (driver, reason) = driver::select(self.requested).map_err(|e| {
            let msg = format!("rsloop: cannot create the {:?} driver: {e}", self.requested);
            match crate::sys::error_code(&e) {
                Some(code) => pyo3::exceptions::PyOSError::new_err((code, msg)),
                None => pyo3::exceptions::PyOSError::new_err(msg),
            }
        })?;
        {
            let mut info = lock(&self.backend);
            let name = driver.kind().name();
            if info.name != name || reason.is_some() {
                *info = BackendInfo {
                    name,
                    reason: reason.or_else(|| info.reason.clone()),
                };
            }
        }
        *lock(&self.waker) = Some(driver.waker());
        *slot = Some(driver);
        // Watchers added before the loop ever ran are armed by the first flush.
        Ok(())
    }

    /// Queues each connection an old ring accepted for its server's callback (closing the
    /// fds of servers that are gone).
    fn deliver_accepted(&self, py: Python<'_>, accepted: Vec<Completion>) -> PyResult<()> {
        let mut to_drop = Vec::new();
        let mut answers = Vec::new();
        self.queues.with(py, |q| {
            for mut c in accepted {
                // Not final: the accept stays registered (re-armed on the new ring).
                c.more = true;
                answers.push((q.route(py, &c, &mut to_drop), c.result));
            }
        });
        drop(to_drop);
        self.answer(py, &mut answers, None)
    }
}

/// The process-wide answer to "can this process use io_uring?", computed once by creating
/// (and dropping) a real ring. Loops use it to say which backend they will run on before the
/// first run creates their own driver.
pub fn planned_backend(requested: Requested) -> PyResult<BackendInfo> {
    use std::sync::OnceLock;
    static URING: OnceLock<Result<(), String>> = OnceLock::new();
    let uring_ok = || {
        URING
            .get_or_init(|| match driver::select(Requested::Uring) {
                Ok(_) => Ok(()),
                Err(e) => Err(e.to_string()),
            })
            .clone()
    };
    match requested {
        Requested::Poll => Ok(BackendInfo {
            name: "poll",
            reason: None,
        }),
        Requested::Uring => match uring_ok() {
            Ok(()) => Ok(BackendInfo {
                name: "uring",
                reason: None,
            }),
            Err(reason) => Err(pyo3::exceptions::PyOSError::new_err(format!(
                "rsloop: io_uring backend requested but unavailable: {reason}"
            ))),
        },
        Requested::Auto => Ok(match uring_ok() {
            Ok(()) => BackendInfo {
                name: "uring",
                reason: None,
            },
            Err(reason) => BackendInfo {
                name: "poll",
                reason: Some(reason),
            },
        }),
    }
}
