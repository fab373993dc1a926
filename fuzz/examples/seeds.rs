//! Writes a starting corpus of valid inputs for every target into `corpus/<target>/`:
//! the objects of a small real world (slots, a checkpoint, its root, shards and history
//! blocks, the marker) built with the layers' own writers, and Mark, WATCH, HTTP, tokens
//! and configuration examples (those with the `server` feature, the default). Run from the
//! fuzz folder: `cargo run --example seeds`.

#[allow(dead_code, unused_imports)]
#[path = "../../checkpoint/tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::time::Duration;

use quire_checkpoint::format::{
    Checkpoint, DEFAULT_WIDTHS, LEGACY_SCHEMA, PackedBlock, Root, decode_shard, path_hash,
};
use quire_checkpoint::keys::{
    checkpoint_key, history_key, parse_checkpoint_key, root_key, shard_key,
};
use quire_checkpoint::{OpenOptions, Replica};
use quire_log::keys::parse_slot_key;

fn write(target: &str, name: &str, bytes: &[u8]) {
    let folder = Path::new("corpus").join(target);
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join(name), bytes).unwrap();
}

fn joined(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

async fn world_objects() {
    let store = common::memory();
    let mut writer = common::new_world(store.clone(), DEFAULT_WIDTHS).await;
    let tagged = common::meta(&[("tags", "a,b"), ("title", "Tagged")]);
    for round in 0..3 {
        writer
            .commit(&[
                common::publish("/a.md", &format!("# A {round}\n")),
                common::publish_with("/notes/b.md", &format!("b {round}\n"), tagged.clone()),
                common::publish(&format!("/c/{round}.md"), "d\n"),
            ])
            .await;
    }
    writer.commit(&[common::archive("/a.md", true)]).await;
    let mut replica = Replica::open(store.clone(), common::PREFIX, &OpenOptions::default())
        .await
        .unwrap();
    replica.checkpoint(Duration::from_secs(1800)).await.unwrap();
    let objects = common::contents(&*store, common::PREFIX).await;
    let get = |key: &str| {
        objects
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, bytes)| bytes.clone())
            .unwrap_or_else(|| panic!("{key} is stored"))
    };
    for (key, bytes) in &objects {
        if let Some(sequence) = parse_slot_key(common::PREFIX, key) {
            write(
                "slot",
                &format!("{sequence}"),
                &joined(&[&sequence.to_be_bytes(), bytes]),
            );
        }
        if key.ends_with("marker") {
            write("marker", "marker", bytes);
        }
        let Some(sequence) = parse_checkpoint_key(common::PREFIX, key) else {
            continue;
        };
        write(
            "checkpoint",
            &format!("{sequence}"),
            &joined(&[&sequence.to_be_bytes(), bytes]),
        );
        let checkpoint =
            Checkpoint::decode(&checkpoint_key(common::PREFIX, sequence), sequence, bytes).unwrap();
        let root_bytes = get(&root_key(common::PREFIX, &checkpoint.root));
        write(
            "root",
            &format!("{sequence}"),
            &joined(&[
                &sequence.to_be_bytes(),
                &checkpoint.documents.to_be_bytes(),
                &checkpoint.world.0,
                &root_bytes,
            ]),
        );
        let root = Root::decode("root", &root_bytes, &checkpoint).unwrap();
        for (t, tier) in root.tiers.iter().enumerate() {
            for (index, shard) in tier.shards.iter().enumerate() {
                let Some(hash) = shard else { continue };
                let shard_bytes = get(&shard_key(common::PREFIX, hash));
                write(
                    "shard",
                    &format!("{sequence}-{t}-{index}"),
                    &joined(&[
                        // The shard target reads the schema from the high bit.
                        &[tier.bits
                            | if root.shard_schema() == LEGACY_SCHEMA {
                                0
                            } else {
                                0x80
                            }],
                        &(index as u64).to_be_bytes(),
                        &sequence.to_be_bytes(),
                        &shard_bytes,
                    ]),
                );
                let docs = decode_shard(
                    "shard",
                    &shard_bytes,
                    root.shard_schema(),
                    tier.bits,
                    index as u32,
                    sequence,
                )
                .unwrap();
                for (doc, _) in docs {
                    // Blocks inside a pack are left out here: each is a range of its pack.
                    for block in doc
                        .history
                        .iter()
                        .filter(|b| PackedBlock::from_name(&b.hash).is_none())
                    {
                        let block_bytes = get(&history_key(common::PREFIX, &block.hash));
                        write(
                            "history",
                            &format!("{}", block.hash),
                            &joined(&[
                                &path_hash(doc.path.as_str()).0,
                                &block.first.to_be_bytes(),
                                &block.last.to_be_bytes(),
                                &block_bytes,
                            ]),
                        );
                    }
                }
            }
        }
    }
}

#[cfg(feature = "server")]
fn protocol_examples() {
    use quire_mark::{Request, Response, Status, Verb, WatchBlock, WatchCursor, WatchEvent};
    let requests = [
        Request::new(Verb::Fetch, "/a.md"),
        Request::new(Verb::Fetch, "/notes/").with_meta("if-none-match", "abc"),
        Request::new(Verb::List, "/")
            .with_meta("page-size", "2")
            .with_meta("cursor", "x"),
        Request::new(Verb::Lookup, "/")
            .with_meta("query", "alpha beta")
            .with_meta("limit", "5"),
        Request::new(Verb::Publish, "/n/a.md")
            .with_meta("auth", "secret")
            .with_meta("title", "A: \"quoted\" 'value'")
            .with_meta("tags", "a, b")
            .with_body("---\nnot: metadata\n---\n# Body\n"),
        Request::new(Verb::Append, "/n/a.md")
            .with_meta("expected-version", "3")
            .with_body("more\n"),
        Request::new(Verb::Watch, "/").with_meta("since", "e1:42"),
    ];
    for (i, request) in requests.iter().enumerate() {
        write(
            "mark_request",
            &format!("{i}"),
            &joined(&[&[i as u8 * 7], &request.encode().unwrap()]),
        );
    }
    let responses = [
        Response::new(Status::Ok)
            .with_meta("version", "3")
            .with_meta("etag", "abc")
            .with_body("# A\n"),
        Response::error(Status::NotFound, "no document at /x.md"),
        Response::new(Status::RateLimited).with_meta("retry-after", "1"),
        Response::new(Status::Ok)
            .with_meta("title", "multi: colon # hash")
            .with_body("---\n"),
    ];
    for (i, response) in responses.iter().enumerate() {
        write(
            "mark_response",
            &format!("{i}"),
            &joined(&[&[i as u8 * 5], &response.encode()]),
        );
    }
    let cursor = |n| WatchCursor::new("e1", n).unwrap();
    let blocks = [
        WatchBlock::control(Status::Ok, cursor(4)),
        WatchBlock::Event(WatchEvent {
            cursor: cursor(5),
            path: "/notes/a b.md".into(),
            version: 2,
            op: "publish".into(),
            hash: Some("abc".into()),
            agent: Some("writer (tool: v1)".into()),
        }),
        WatchBlock::control(Status::Resync, cursor(5)),
    ];
    let stream: Vec<u8> = blocks
        .iter()
        .flat_map(|b| b.encode().unwrap().to_vec())
        .collect();
    write("watch_stream", "stream", &joined(&[&[3], &stream]));
    write(
        "watch_stream",
        "one",
        &joined(&[&[63], &blocks[1].encode().unwrap()]),
    );
    write(
        "stored_values",
        "plain",
        b"/notes/a.md\0title\0Hello: world\0tags\0a, b\0agent\0w (x)",
    );
    write(
        "stored_values",
        "time",
        "/t.md\0modified\02026-01-01T00:00:00Z\0note\0caf\u{e9} \u{2192}".as_bytes(),
    );
    write(
        "http_request",
        "get",
        b"\0/notes/a%20b.md?include-archived=1\0if-none-match\0\"abc\"",
    );
    write(
        "http_request",
        "list",
        b"\0/notes/?list&page-size=2&cursor=x\0authorization\0Bearer t",
    );
    write(
        "http_request",
        "put",
        b"\x02/notes/a.md\0meta-title\0Hello\0if-match\0\"3\"\0meta-tags\0a,b",
    );
    write(
        "http_request",
        "post",
        b"\x03/notes/a.md?append\0expected-version\04",
    );
    write(
        "http_request",
        "watch",
        b"\0/?watch&since=e1%3A4\0if-modified-since\0Tue, 01 Dec 2026 10:00:00 GMT",
    );
    let tokens = "[tokens.writer]\nhash = \"sha256-0000000000000000000000000000000000000000000000000000000000000000\"\noperations = [\"publish\"]\npaths = [\"/**\"]\n\n[tokens.reader]\nhash = \"sha256-1111111111111111111111111111111111111111111111111111111111111111\"\noperations = [\"read\"]\npaths = [\"/notes/*.md\", \"/docs/**/secret.md\", \"/private/\"]\nexpires = \"2030-01-01T00:00:00Z\"\n";
    write(
        "tokens",
        "two",
        format!("{tokens}\0secret\0/notes/a.md").as_bytes(),
    );
    write("tokens", "pattern", b"/docs/**/x.md\0\0/docs/a/b/x.md");
    write(
        "config",
        "default",
        quire_server::config::DEFAULT_CONFIG.as_bytes(),
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    world_objects().await;
    #[cfg(feature = "server")]
    protocol_examples();
    println!("seeds written under corpus/");
}
