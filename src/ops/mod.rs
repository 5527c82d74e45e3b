//! CPU reference ops.
