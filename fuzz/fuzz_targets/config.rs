//! The configuration: parsing never panics, and whatever it accepts can be used: every
//! duration can be added to the clock, and every world's limiter can be built.
#![no_main]

use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use quire_server::config::Config;
use quire_server::limits::Limiter;

fn usable(duration: Duration, what: &str) {
    assert!(
        Instant::now().checked_add(duration).is_some(),
        "{what} {duration:?} overflows the clock"
    );
}

fuzz_target!(|text: &str| {
    let Ok(config) = Config::parse(text, "quire.toml") else {
        return;
    };
    let listen = &config.listen;
    usable(listen.idle_timeout, "idle_timeout");
    usable(listen.shutdown_timeout, "shutdown_timeout");
    usable(listen.http_header_timeout, "http_header_timeout");
    usable(listen.http_body_timeout, "http_body_timeout");
    assert!(
        !listen.idle_timeout.is_zero(),
        "idle_timeout 0 disables QUIC idle timeouts"
    );
    for world in &config.worlds {
        usable(world.limits.request_timeout, "request_timeout");
        usable(world.limits.queue_wait, "queue_wait");
        assert!(!world.limits.request_timeout.is_zero());
        let _ = Limiter::new(world.limits.clone());
    }
});
