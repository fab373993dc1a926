//! The S3 driver.
