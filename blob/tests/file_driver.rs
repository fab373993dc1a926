//! The file driver against the contract: round trips, conditions, listing order and paging,
//! damaged files, and races between tasks and between processes sharing one directory.
#![allow(
    clippy::disallowed_methods,
    reason = "the driver stamps real modification times"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures::StreamExt;
use quire_blob::file::DirBlobStore;
use quire_blob::memory::MemoryStore;
use quire_blob::{BlobStore, ErrorKind, Generation, MAX_KEY_LEN, MAX_LIST_PAGE, list_all};
use tokio::sync::Barrier;

fn store() -> (tempfile::TempDir, DirBlobStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = DirBlobStore::open(dir.path().join("store")).unwrap();
    (dir, store)
}

fn kind_of<T: std::fmt::Debug>(result: quire_blob::Result<T>) -> ErrorKind {
    result.unwrap_err().kind()
}

#[tokio::test]
async fn round_trip_keeps_bytes_and_attributes() {
    let (_dir, store) = store();
    let before = SystemTime::now() - Duration::from_secs(5);
    let created = store
        .create("docs/a", Bytes::from_static(b"hello"))
        .await
        .unwrap();
    assert_eq!(created.key, "docs/a");
    assert_eq!(created.size, 5);
    assert!(created.modified >= before);
    assert_eq!(created.generation.as_str().len(), 32);

    let object = store.get("docs/a").await.unwrap();
    assert_eq!(object.data, Bytes::from_static(b"hello"));
    assert_eq!(object.attributes, created);
    assert_eq!(store.head("docs/a").await.unwrap(), created);

    let empty = store.create("docs/empty", Bytes::new()).await.unwrap();
    assert_eq!(empty.size, 0);
    assert!(store.get("docs/empty").await.unwrap().data.is_empty());

    assert_eq!(
        kind_of(store.get("docs/missing").await),
        ErrorKind::NotFound
    );
    assert_eq!(kind_of(store.head("docs").await), ErrorKind::NotFound);
    assert_eq!(
        kind_of(store.get_range("nope", 0..1).await),
        ErrorKind::NotFound
    );

    // A second handle on the same directory sees the same objects.
    let again = DirBlobStore::open(store.root()).unwrap();
    assert_eq!(again.get("docs/a").await.unwrap().attributes, created);
}

#[tokio::test]
async fn invalid_keys_are_refused_before_any_io() {
    let (_dir, store) = store();
    for key in ["", ".", "..", "a\nb", "a\rb"] {
        assert_eq!(
            kind_of(store.create(key, Bytes::new()).await),
            ErrorKind::Precondition,
            "{key:?}"
        );
        assert_eq!(kind_of(store.get(key).await), ErrorKind::Precondition);
    }
    let too_long = "k".repeat(MAX_KEY_LEN + 1);
    assert_eq!(
        kind_of(store.create(&too_long, Bytes::new()).await),
        ErrorKind::Precondition
    );
    assert!(list_all(&store, "", "").await.unwrap().is_empty());
}

#[tokio::test]
async fn duplicate_create_changes_nothing() {
    let (_dir, store) = store();
    let first = store.create("k", Bytes::from_static(b"one")).await.unwrap();
    let err = store
        .create("k", Bytes::from_static(b"two"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Precondition);
    assert_eq!(err.key(), "k");
    let object = store.get("k").await.unwrap();
    assert_eq!(object.data, Bytes::from_static(b"one"));
    assert_eq!(object.attributes.generation, first.generation);
    // The loser leaves no temporary file behind.
    let names: Vec<_> = std::fs::read_dir(store.root())
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(names, ["k.o"]);
}

#[tokio::test]
async fn replace_and_delete_hold_only_at_the_current_generation() {
    let (_dir, store) = store();
    let first = store.create("k", Bytes::from_static(b"v1")).await.unwrap();
    let stale = Generation::new("0".repeat(32));

    assert_eq!(
        kind_of(store.replace("k", &stale, Bytes::from_static(b"x")).await),
        ErrorKind::Precondition
    );
    assert_eq!(
        kind_of(store.delete("k", &stale).await),
        ErrorKind::Precondition
    );
    assert_eq!(
        store.get("k").await.unwrap().data,
        Bytes::from_static(b"v1")
    );

    let second = store
        .replace("k", &first.generation, Bytes::from_static(b"v2!"))
        .await
        .unwrap();
    assert_ne!(second.generation, first.generation);
    assert_eq!(second.size, 3);
    assert_eq!(store.head("k").await.unwrap(), second);
    assert_eq!(
        kind_of(
            store
                .replace("k", &first.generation, Bytes::from_static(b"x"))
                .await
        ),
        ErrorKind::Precondition
    );
    assert_eq!(
        kind_of(store.delete("k", &first.generation).await),
        ErrorKind::Precondition
    );

    store.delete("k", &second.generation).await.unwrap();
    assert_eq!(kind_of(store.get("k").await), ErrorKind::NotFound);
    assert_eq!(
        kind_of(store.delete("k", &second.generation).await),
        ErrorKind::Precondition
    );
    assert_eq!(
        kind_of(
            store
                .replace("k", &second.generation, Bytes::from_static(b"x"))
                .await
        ),
        ErrorKind::Precondition
    );
    assert_eq!(
        kind_of(
            store
                .replace("never/was", &second.generation, Bytes::new())
                .await
        ),
        ErrorKind::Precondition
    );
}

#[tokio::test]
async fn recreated_key_gets_a_new_generation() {
    let (_dir, store) = store();
    let mut seen = BTreeSet::new();
    for _ in 0..5 {
        let attributes = store
            .create("a/b", Bytes::from_static(b"same"))
            .await
            .unwrap();
        assert!(
            seen.insert(attributes.generation.as_str().to_owned()),
            "repeated"
        );
        store.delete("a/b", &attributes.generation).await.unwrap();
    }
}

#[tokio::test]
async fn range_reads_cut_at_the_end() {
    let (_dir, store) = store();
    let data: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
    store.create("r", Bytes::from(data.clone())).await.unwrap();
    store.create("empty", Bytes::new()).await.unwrap();
    for (range, expected) in [
        (0..10, &data[0..10]),
        (9_990..10_000, &data[9_990..]),
        (9_990..20_000, &data[9_990..]),
        (5_000..5_000, &data[5_000..5_000]),
        (10_000..10_000, &data[10_000..]),
        (0..u64::MAX, &data[..]),
    ] {
        assert_eq!(
            store.get_range("r", range.clone()).await.unwrap(),
            Bytes::copy_from_slice(expected),
            "{range:?}"
        );
    }
    assert!(store.get_range("empty", 0..0).await.unwrap().is_empty());
    assert_eq!(
        kind_of(store.get_range("empty", 0..10).await),
        ErrorKind::Precondition
    );
    let inverted = std::ops::Range { start: 20, end: 10 };
    for bad in [10_000..10_001, 10_001..10_002, inverted] {
        assert_eq!(
            kind_of(store.get_range("r", bad.clone()).await),
            ErrorKind::Precondition,
            "{bad:?}"
        );
    }
}

/// Keys whose bytes sort around `/`, need escaping, or fill the whole key length.
fn awkward_keys() -> Vec<String> {
    let mut keys: Vec<String> = [
        "a",
        "a/b",
        "a-b",
        "a.b",
        "a b",
        "a/",
        "a//b",
        "/a",
        "/",
        "a0",
        "A",
        "a/b/c",
        "a/b-c",
        "a/b.c",
        "a/b/",
        "é",
        "é/ü",
        "日本/語",
        "a\u{0}b",
        "%41",
        ".a",
        "a/.",
        "a/..",
        "...",
        "~",
        "\u{10ffff}",
    ]
    .map(String::from)
    .to_vec();
    keys.push("x".repeat(MAX_KEY_LEN));
    keys.push("~".repeat(MAX_KEY_LEN));
    keys.push("/".repeat(MAX_KEY_LEN));
    keys.push("é".repeat(MAX_KEY_LEN / 2));
    keys.push("a/".repeat(MAX_KEY_LEN / 2));
    // Segments around the length where a name must be split, with siblings sorting between.
    for len in [79, 80, 81, 239, 240, 241, 500] {
        let long = "q".repeat(len);
        keys.push(long.clone());
        keys.push(format!("{long}/child"));
        keys.push(format!("{long}-"));
        keys.push(format!("{long}0"));
        keys.push(format!("{long}.x/y"));
        keys.push(format!("long/{}", "%".repeat(len)));
    }
    keys
}

fn many_keys() -> Vec<String> {
    let mut keys = awkward_keys();
    for i in 0..1_600 {
        keys.push(format!("log/{:016}", i * 7));
        if i % 3 == 0 {
            keys.push(format!("d/{}/{i}", i % 10));
        }
    }
    keys.sort();
    keys.dedup();
    keys
}

async fn fill(store: &dyn BlobStore, keys: &[String]) {
    futures::stream::iter(keys)
        .for_each_concurrent(16, |key| async move {
            store.create(key, Bytes::from(key.clone())).await.unwrap();
        })
        .await;
}

async fn pages(store: &dyn BlobStore, prefix: &str, start_after: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = store
            .list(prefix, start_after, cursor.as_deref())
            .await
            .unwrap();
        assert!(page.objects.len() <= MAX_LIST_PAGE);
        out.push(page.objects.into_iter().map(|a| a.key).collect());
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return out,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn listing_pages_through_many_awkward_keys_in_byte_order() {
    let (_dir, store) = store();
    let model = MemoryStore::new();
    let keys = many_keys();
    assert!(keys.len() > 2 * MAX_LIST_PAGE);
    fill(&store, &keys).await;
    fill(&model, &keys).await;

    let all = pages(&store, "", "").await;
    assert_eq!(all.len(), keys.len().div_ceil(MAX_LIST_PAGE));
    assert_eq!(all.concat(), keys, "every key once, in byte order");

    let mut probes: Vec<String> = [
        "", "a", "a/", "a/b", "a-", "a.", "a ", "log/", "log/0000", "d/", "d/3/", "q", "é", "zzz",
        "/", "//", "long/%%",
    ]
    .map(String::from)
    .to_vec();
    probes.push("q".repeat(240));
    probes.push("x".repeat(MAX_KEY_LEN - 1));
    // Every probe as a prefix and as a start-after, and a few combinations of both.
    let mut pairs: Vec<(&str, &str)> = Vec::new();
    for probe in &probes {
        pairs.extend([(probe.as_str(), ""), ("", probe.as_str())]);
        for start_after in ["a/b", "log/0000", "q"] {
            pairs.push((probe.as_str(), start_after));
        }
    }
    for (prefix, start_after) in pairs {
        assert_eq!(
            pages(&store, prefix, start_after).await,
            pages(&model, prefix, start_after).await,
            "prefix {prefix:?} start_after {start_after:?}"
        );
    }

    // Attributes in a listing are the objects' own.
    let listed = list_all(&store, "a", "").await.unwrap();
    for attributes in listed {
        assert_eq!(store.head(&attributes.key).await.unwrap(), attributes);
    }

    // A cursor is bound to its arguments.
    let page = store.list("", "", None).await.unwrap();
    let cursor = page.next_cursor.unwrap();
    assert_eq!(
        kind_of(store.list("log/", "", Some(&cursor)).await),
        ErrorKind::Precondition
    );

    // Deleting every key leaves no directory behind, however deep.
    let everything = list_all(&store, "", "").await.unwrap();
    futures::stream::iter(everything)
        .for_each_concurrent(16, |attributes| {
            let store = &store;
            async move {
                store
                    .delete(&attributes.key, &attributes.generation)
                    .await
                    .unwrap();
            }
        })
        .await;
    assert_eq!(std::fs::read_dir(store.root()).unwrap().count(), 0);
}

#[tokio::test]
async fn damaged_files_are_integrity_errors_and_foreign_names_are_ignored() {
    let (_dir, store) = store();
    store
        .create("ok", Bytes::from_static(b"fine"))
        .await
        .unwrap();
    let good = store
        .create("bad", Bytes::from_static(b"fine"))
        .await
        .unwrap();
    let path = store.object_path("bad");
    let mut header = std::fs::read(&path).unwrap();
    header.truncate(25);
    let mut wrong_version = header.clone();
    wrong_version[8] = 99;
    let damaged: [(&str, Vec<u8>); 4] = [
        (
            "foreign bytes",
            b"just some text, long enough to be a header".to_vec(),
        ),
        ("short", b"QUIRE".to_vec()),
        ("wrong version", wrong_version),
        ("empty", Vec::new()),
    ];
    for (what, bytes) in damaged {
        std::fs::write(&path, bytes).unwrap();
        assert_eq!(
            kind_of(store.get("bad").await),
            ErrorKind::Integrity,
            "{what}"
        );
        assert_eq!(
            kind_of(store.head("bad").await),
            ErrorKind::Integrity,
            "{what}"
        );
        assert_eq!(
            kind_of(store.get_range("bad", 0..1).await),
            ErrorKind::Integrity,
            "{what}"
        );
        assert_eq!(
            kind_of(store.replace("bad", &good.generation, Bytes::new()).await),
            ErrorKind::Integrity,
            "{what}"
        );
        assert_eq!(
            kind_of(store.delete("bad", &good.generation).await),
            ErrorKind::Integrity,
            "{what}"
        );
        let err = store.list("", "", None).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Integrity, "{what}");
        assert!(err.detail().contains("\"bad\""), "{err}");
        // Listings that do not reach the damaged key still work.
        assert_eq!(list_all(&store, "o", "").await.unwrap().len(), 1);
    }
    std::fs::remove_file(&path).unwrap();
    std::fs::create_dir(&path).unwrap();
    assert_eq!(kind_of(store.get("bad").await), ErrorKind::Integrity);
    std::fs::remove_dir(&path).unwrap();

    // Names the driver never writes are not keys.
    let root = store.root();
    for foreign in [
        "README",
        ".tmp-left-over",
        "%61.o",
        "x%2.o",
        "A.o",
        "ok.txt",
        "%2F.o",
    ] {
        std::fs::write(root.join(foreign), b"QUIREOBJ").unwrap();
    }
    std::fs::create_dir(root.join("empty.d")).unwrap();
    std::fs::create_dir_all(root.join("nested.d/deeper.d")).unwrap();
    std::fs::create_dir(root.join("stray.c")).unwrap();
    let keys: Vec<String> = list_all(&store, "", "")
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.key)
        .collect();
    assert_eq!(keys, ["ok"]);
    store.create("nested/deeper/x", Bytes::new()).await.unwrap();
    assert_eq!(list_all(&store, "nested/", "").await.unwrap().len(), 1);
}

#[tokio::test]
async fn deletes_remove_emptied_directories() {
    let (_dir, store) = store();
    let deep = store.create("d/e/f", Bytes::new()).await.unwrap();
    let sibling = store.create("d/g", Bytes::new()).await.unwrap();
    store.delete("d/e/f", &deep.generation).await.unwrap();
    assert!(!store.root().join("d.d/e.d").exists());
    assert!(store.root().join("d.d").exists(), "still holds d/g");
    store.delete("d/g", &sibling.generation).await.unwrap();
    assert_eq!(std::fs::read_dir(store.root()).unwrap().count(), 0);
    assert!(list_all(&store, "", "").await.unwrap().is_empty());
    store.create("d/e/f", Bytes::new()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn creates_survive_directories_removed_under_them() {
    let (_dir, store) = store();
    let store = Arc::new(store);
    // Two writers share one directory; each delete of the last object removes the directory
    // while the other writer may be creating in it.
    let tasks: Vec<_> = ["shared/deep/a", "shared/deep/b"]
        .into_iter()
        .map(|key| {
            let store = store.clone();
            tokio::spawn(async move {
                for _ in 0..200 {
                    let attributes = store.create(key, Bytes::new()).await.unwrap();
                    store.delete(key, &attributes.generation).await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert!(list_all(&*store, "", "").await.unwrap().is_empty());
}

const RACERS: usize = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_creates_have_one_winner() {
    let (_dir, store) = store();
    let store = Arc::new(store);
    let barrier = Arc::new(Barrier::new(RACERS));
    let tasks: Vec<_> = (0..RACERS)
        .map(|racer| {
            let (store, barrier) = (store.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                store
                    .create("race/key", Bytes::from(racer.to_string()))
                    .await
                    .map(|attributes| (racer, attributes))
            })
        })
        .collect();
    let mut winners = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            Ok(won) => winners.push(won),
            Err(err) => assert_eq!(err.kind(), ErrorKind::Precondition, "{err}"),
        }
    }
    assert_eq!(winners.len(), 1);
    let (racer, attributes) = &winners[0];
    let object = store.get("race/key").await.unwrap();
    assert_eq!(object.data, Bytes::from(racer.to_string()));
    assert_eq!(&object.attributes, attributes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_replaces_at_one_generation_have_one_winner() {
    let (_dir, store) = store();
    let store = Arc::new(store);
    let base = store
        .create("race", Bytes::from_static(b"base"))
        .await
        .unwrap();
    let barrier = Arc::new(Barrier::new(RACERS));
    let tasks: Vec<_> = (0..RACERS)
        .map(|racer| {
            let (store, barrier, generation) =
                (store.clone(), barrier.clone(), base.generation.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                store
                    .replace("race", &generation, Bytes::from(racer.to_string()))
                    .await
                    .map(|attributes| (racer, attributes))
            })
        })
        .collect();
    let mut winners = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            Ok(won) => winners.push(won),
            Err(err) => assert_eq!(err.kind(), ErrorKind::Precondition, "{err}"),
        }
    }
    assert_eq!(winners.len(), 1);
    let (racer, attributes) = &winners[0];
    let object = store.get("race").await.unwrap();
    assert_eq!(object.data, Bytes::from(racer.to_string()));
    assert_eq!(&object.attributes, attributes);
    // No temporary file of a loser is left.
    assert_eq!(std::fs::read_dir(store.root()).unwrap().count(), 1);
}

// Two processes on one directory. The test binary runs itself twice with these variables set;
// in a child, this test is the racer instead.
const RACE_STORE_VAR: &str = "QUIRE_FILE_RACE_STORE";
const RACE_REPORT_VAR: &str = "QUIRE_FILE_RACE_REPORT";
const RACE_NAME_VAR: &str = "QUIRE_FILE_RACE_NAME";
const RACE_KEYS: usize = 300;
const RACE_INCREMENTS: u64 = 50;
const COUNTER_KEY: &str = "counter";

fn race_key(index: usize) -> String {
    format!("race/{}/{index}", index % 7)
}

/// The child's part: wait for the parent's go, create every race key, then add to the shared
/// counter with compare-and-swap loops; report the keys won.
async fn race_as_child(store_dir: String, report: String, name: String) {
    let store = DirBlobStore::open(store_dir).unwrap();
    let mut go = [0u8; 1];
    std::io::stdin().read_exact(&mut go).unwrap();
    let mut won = Vec::new();
    for index in 0..RACE_KEYS {
        let key = race_key(index);
        match store.create(&key, Bytes::from(name.clone())).await {
            Ok(_) => won.push(key),
            Err(err) => assert_eq!(err.kind(), ErrorKind::Precondition, "{err}"),
        }
    }
    for _ in 0..RACE_INCREMENTS {
        loop {
            let current = store.get(COUNTER_KEY).await.unwrap();
            let value: u64 = std::str::from_utf8(&current.data).unwrap().parse().unwrap();
            let next = Bytes::from((value + 1).to_string());
            match store
                .replace(COUNTER_KEY, &current.attributes.generation, next)
                .await
            {
                Ok(_) => break,
                Err(err) => assert_eq!(err.kind(), ErrorKind::Precondition, "{err}"),
            }
        }
    }
    std::fs::write(report, won.join("\n")).unwrap();
}

#[tokio::test]
async fn two_processes_race_creates_and_replaces() {
    if let (Ok(store_dir), Ok(report), Ok(name)) = (
        std::env::var(RACE_STORE_VAR),
        std::env::var(RACE_REPORT_VAR),
        std::env::var(RACE_NAME_VAR),
    ) {
        return race_as_child(store_dir, report, name).await;
    }
    let (dir, store) = store();
    store
        .create(COUNTER_KEY, Bytes::from_static(b"0"))
        .await
        .unwrap();
    let names = ["first", "second"];
    let mut children: Vec<_> = names
        .iter()
        .map(|name| {
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "two_processes_race_creates_and_replaces",
                    "--exact",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(RACE_STORE_VAR, store.root())
                .env(RACE_REPORT_VAR, dir.path().join(name))
                .env(RACE_NAME_VAR, name)
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    // Both are running before either may start: they race from the first key.
    for child in &mut children {
        child.stdin.take().unwrap().write_all(b"!").unwrap();
    }
    for child in &mut children {
        assert!(child.wait().unwrap().success());
    }

    let mut winner_of: BTreeMap<String, &str> = BTreeMap::new();
    for name in names {
        let report = std::fs::read_to_string(dir.path().join(name)).unwrap();
        for key in report.lines() {
            assert!(
                winner_of.insert(key.to_owned(), name).is_none(),
                "{key} won by both processes"
            );
        }
    }
    assert_eq!(winner_of.len(), RACE_KEYS, "every key won by one process");
    for (key, name) in &winner_of {
        assert_eq!(
            store.get(key).await.unwrap().data,
            Bytes::from(name.to_string())
        );
    }
    let counter = store.get(COUNTER_KEY).await.unwrap().data;
    assert_eq!(
        counter,
        Bytes::from((2 * RACE_INCREMENTS).to_string()),
        "no lost update"
    );
}
