//! The GCS driver.
