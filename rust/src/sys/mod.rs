//! Small `unsafe` islands over libc. Every `unsafe` block in the crate outside the drivers
//! lives here, each with a `// SAFETY:` line.
