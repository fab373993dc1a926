//! What a write may store (input: a path, then NUL-separated metadata keys and values) can be read back on every transport: a path and metadata that
//! the write-time checks accept encode in a Mark response and in a WATCH event, and both
//! parse back to what was stored.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quire_fuzz::fields;
use quire_log::DocPath;
use quire_log::metadata::{self, Metadata};
use quire_mark::ErrorKind;
use quire_mark::{Response, Status, WatchBlock, WatchCursor, WatchEvent};

fuzz_target!(|data: &[u8]| {
    let Some(fields) = fields(data) else {
        return;
    };
    let Some((raw_path, pairs)) = fields.split_first() else {
        return;
    };
    let Ok(path) = DocPath::parse(raw_path) else {
        return;
    };
    if quire_log::path::check_new(path.as_str()).is_err() {
        return;
    }
    let written: Metadata = pairs
        .chunks(2)
        .map(|pair| {
            (
                pair[0].to_owned(),
                pair.get(1).copied().unwrap_or("").to_owned(),
            )
        })
        .collect();
    let Ok(stored) = metadata::normalize(&written) else {
        return;
    };
    if metadata::check_new(&stored).is_err() {
        return;
    }
    // A FETCH answer carries the stored pairs (protocol keys are refused at write).
    let mut response = Response::new(Status::Ok);
    for (key, value) in &stored {
        if key != "status" {
            response.metadata.insert(key.clone(), value.clone());
        }
    }
    response
        .metadata
        .insert("path".into(), path.as_str().to_owned());
    let parsed = Response::parse(&response.encode()).expect("a stored value reads back");
    assert_eq!(parsed, response);
    // A WATCH event carries the path and the agent.
    for agent in stored.values().take(4) {
        let event = WatchBlock::Event(WatchEvent {
            cursor: WatchCursor::new("e", 7).expect("a valid epoch"),
            path: path.as_str().to_owned(),
            version: 1,
            op: "publish".into(),
            hash: None,
            agent: Some(agent.clone()),
        });
        match event.encode() {
            Ok(bytes) => assert_eq!(WatchBlock::parse(&bytes).expect("an event parses"), event),
            Err(error) => assert_eq!(error.kind(), ErrorKind::TooLarge, "{error:?}"),
        }
    }
});
