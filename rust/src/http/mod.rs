//! HTTP/1.1 for `rsloop.http`, uvicorn's protocol with its parsing and head building done
//! here: [`request`] reads requests (strictly: anything two readers could frame
//! differently is refused), [`response`] writes response heads and chunks. Plain Rust; the
//! Python face is `py/http.rs`.

pub mod request;
pub mod response;
