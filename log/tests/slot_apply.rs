//! The slot format and `WorldState::apply`: round trips, strict decoding, and refusal of
//! every transition no writer could have committed.

mod common;

use bytes::Bytes;
use common::*;
use proptest::prelude::*;
use quire_log::build::Mutation;
use quire_log::slot::EncodedSlot;
use quire_log::{DocPath, ErrorKind, Hash, Location, WorldState, keys};

fn path(p: &str) -> DocPath {
    DocPath::parse(p).unwrap()
}

#[test]
fn slot_round_trips_and_locates_inline_bytes() {
    let mut state = WorldState::genesis(WORLD);
    let mut bases = Vec::new();
    let slot = commit(
        &mut state,
        &[
            publish("/a.md", "# A\nbody"),
            publish_with(
                "/docs/b.md",
                "b",
                meta(&[("tags", "x, y"), ("agent", "bot")]),
            ),
            publish("/a.md", "# A\nsecond"),
        ],
        true,
        &mut bases,
    );
    let decoded = EncodedSlot::decode(&keys::slot_key("", 2), 2, slot.bytes.clone()).unwrap();
    assert_eq!(decoded.slot, slot.slot);
    assert_eq!(decoded.hash, slot.hash);
    assert_eq!(decoded.slot.entries[1].agent.as_deref(), Some("bot"));
    // Every inline version can be read back with a range of the slot object.
    for (i, entry) in decoded.slot.entries.iter().enumerate() {
        let write = entry.write.as_ref().unwrap();
        let Location::Inline {
            slot: first,
            offset,
        } = decoded.location(i)
        else {
            panic!("inline expected");
        };
        assert_eq!(first, 2);
        let range = offset as usize..(offset + write.size) as usize;
        assert_eq!(Hash::of(&slot.bytes[range]), write.hash);
    }
    let a = state.doc(&path("/a.md")).unwrap();
    assert_eq!((a.current, a.first, a.recent.len()), (2, 1, 2));
    assert_eq!(state.sequence(), 4);
    assert_eq!(state.tip(), slot.hash);
    // The wrong key's sequence is refused.
    let err = EncodedSlot::decode(&keys::slot_key("", 3), 3, slot.bytes.clone()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Integrity);
}

#[test]
fn decoding_refuses_non_canonical_bytes() {
    let mut state = WorldState::genesis(WORLD);
    let slot = commit(&mut state, &[publish("/a.md", "a")], true, &mut Vec::new());
    let key = keys::slot_key("", 2);
    let good = slot.bytes.to_vec();
    let decode = |bytes: Vec<u8>| EncodedSlot::decode(&key, 2, Bytes::from(bytes));
    assert!(decode(good.clone()).is_ok());

    let mut trailing = good.clone();
    trailing.push(0);
    assert_eq!(decode(trailing).unwrap_err().kind(), ErrorKind::Integrity);

    // `schema: 1` written with a one-byte-argument integer instead of the short form.
    let marker = b"fschema\x01";
    let at = good
        .windows(marker.len())
        .position(|w| w == marker)
        .unwrap();
    let mut long = good[..at + 7].to_vec();
    long.extend_from_slice(&[0x18, 0x01]);
    long.extend_from_slice(&good[at + 8..]);
    assert_eq!(decode(long).unwrap_err().kind(), ErrorKind::Integrity);

    // An unknown field (the top-level map grows by one key).
    let mut unknown = good.clone();
    assert_eq!(unknown[0], 0xa7);
    unknown[0] = 0xa8;
    unknown.extend_from_slice(b"\x65extra\x01");
    assert_eq!(decode(unknown).unwrap_err().kind(), ErrorKind::Integrity);

    // Flipping any bit of an inline version breaks its hash.
    let mut flipped = good.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    assert_eq!(decode(flipped).unwrap_err().kind(), ErrorKind::Integrity);
}

fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    let paths = prop::sample::select(vec![
        "/a.md",
        "/b.md",
        "/d/c.md",
        "/d/.h.md",
        "/versions/x.md",
    ]);
    let op = (
        paths,
        "[a-z #\n]{0,40}",
        0u8..4,
        prop::option::of("[a-z]{1,8}"),
    )
        .prop_map(|(p, body, kind, tag)| match kind {
            0 => archive(p, true),
            1 => archive(p, false),
            _ => publish_with(
                p,
                &body,
                tag.map(|t| meta(&[("tags", &t)])).unwrap_or_default(),
            ),
        });
    prop::collection::vec(op, 1..12)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Random histories: every slot decodes back to itself, replaying the decoded slots gives
    /// the same state, and any bytes the decoder accepts re-encode identically.
    #[test]
    fn encode_decode_and_canonical(batch in mutations(), flip in any::<prop::sample::Index>(), inline in any::<bool>()) {
        let mut state = WorldState::genesis(WORLD);
        let mut replayed = WorldState::genesis(WORLD);
        let mut bases = Vec::new();
        for m in batch {
            // Skip mutations that do not build (missing documents, no-ops, collisions).
            let built = quire_log::build::build(&state, &m, quire_log::OperationId([1; 16]), quire_log::Timestamp(5), quire_log::build::BuildLimits { max_documents: 0 }, &mut None, None);
            if !matches!(built, Ok(quire_log::build::Built::Change(_))) {
                continue;
            }
            let slot = commit(&mut state, &[m], inline, &mut bases);
            let key = keys::slot_key("", slot.slot.first);
            let decoded = EncodedSlot::decode(&key, slot.slot.first, slot.bytes.clone()).unwrap();
            prop_assert_eq!(&decoded.slot, &slot.slot);
            let copied = replayed.apply(&decoded).unwrap();
            replayed.apply_in_place(&decoded).unwrap();
            prop_assert!(replayed == copied);
            let mut bytes = slot.bytes.to_vec();
            let i = flip.index(bytes.len());
            bytes[i] ^= 0x01;
            if let Ok(other) = EncodedSlot::decode(&key, slot.slot.first, Bytes::from(bytes.clone())) {
                let again = EncodedSlot::encode(other.slot.clone(), &key).unwrap();
                prop_assert_eq!(&again.bytes[..], &bytes[..]);
            }
        }
        prop_assert!(replayed == state);
        state.check_indexes().unwrap();
    }
}

/// Re-encodes `slot` with `tamper` applied to it; the tampered slot must be refused by
/// encoding's shape checks or by apply.
fn refused(state: &WorldState, slot: &EncodedSlot, tamper: impl FnOnce(&mut quire_log::Slot)) {
    let mut raw = slot.slot.clone();
    tamper(&mut raw);
    let key = keys::slot_key("", raw.first.max(2));
    match EncodedSlot::encode(raw, &key) {
        Err(e) => assert_eq!(e.kind(), ErrorKind::Integrity, "{e}"),
        Ok(encoded) => {
            let err = state.apply(&encoded).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Integrity, "{err}");
            refused_in_place(state, &encoded);
        }
    }
}

/// A copy of `state` sharing nothing with it, so applying in place changes its own nodes.
fn unshared(state: &WorldState) -> WorldState {
    WorldState::restore(
        state.world(),
        state.sequence(),
        state.tip(),
        state.docs().map(|d| (**d).clone()),
    )
    .unwrap()
}

/// `slot` is refused in place too, on a state nothing else shares, leaving it exactly as
/// it was.
fn refused_in_place(state: &WorldState, slot: &EncodedSlot) {
    let mut in_place = unshared(state);
    let err = in_place.apply_in_place(slot).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Integrity, "{err}");
    assert!(
        in_place == *state,
        "a refused slot changed the state: {err}"
    );
    in_place.check_indexes().unwrap();
}

#[test]
fn apply_refuses_illegal_transitions() {
    let mut state = WorldState::genesis(WORLD);
    let mut bases = Vec::new();
    commit(
        &mut state,
        &[publish("/dir/doc.md", "v1"), publish("/live.md", "x")],
        false,
        &mut bases,
    );
    commit(&mut state, &[archive("/live.md", true)], false, &mut bases);
    let base = state.clone();

    // A legal update of /dir/doc.md, then variations of it.
    let mut probe = base.clone();
    let update = commit(
        &mut probe,
        &[publish("/dir/doc.md", "v2")],
        false,
        &mut bases.clone(),
    );
    refused(&base, &update, |s| s.world = quire_log::WorldId([1; 16]));
    refused(&base, &update, |s| s.first += 1);
    refused(&base, &update, |s| s.prev = Hash::of(b"elsewhere"));
    refused(&base, &update, |s| s.entries[0].current = 3);
    refused(&base, &update, |s| s.entries[0].current = 1);
    refused(&base, &update, |s| {
        s.entries[0].write.as_mut().unwrap().previous = Some(Hash::of(b"x"))
    });
    refused(&base, &update, |s| s.entries[0].archived = true);
    refused(&base, &update, |s| s.entries[0].path = path("/live.md")); // archived document
    refused(&base, &update, |s| s.entries[0].path = path("/dir")); // new path where a directory is
    refused(&base, &update, |s| {
        s.entries[0].path = path("/dir/doc.md/child.md")
    }); // beneath a document
    refused(&base, &update, |s| s.entries[0].path = path("/fresh.md")); // new path not at version 1
    refused(&base, &update, |s| {
        let dup = s.entries[0].clone();
        s.entries.push(dup); // duplicate operation id
    });
    refused(&base, &update, |s| s.entries.clear());

    // A new document: version 1 only, first retained 1.
    let mut probe = base.clone();
    let create = commit(
        &mut probe,
        &[publish("/new.md", "n")],
        false,
        &mut bases.clone(),
    );
    refused(&base, &create, |s| s.entries[0].first = 2);
    refused(&base, &create, |s| s.entries[0].path = path("/dir/doc.md")); // exists: not a create
    refused(&base, &create, |s| {
        s.entries[0].path = path("/dir/doc.md/x.md")
    });
    refused(&base, &create, |s| s.entries[0].path = path("/dir")); // a directory is there

    // Retention moves the first retained version forward only.
    let mut pruned = base.clone();
    let mut b2 = bases.clone();
    commit(&mut pruned, &[publish("/dir/doc.md", "v2")], false, &mut b2);
    let keep1 = commit(
        &mut pruned.clone(),
        &[publish_with(
            "/dir/doc.md",
            "v3",
            meta(&[("retention", "1")]),
        )],
        false,
        &mut b2.clone(),
    );
    assert_eq!(keep1.slot.entries[0].first, 3);
    let mut after = pruned.clone();
    after = after.apply(&keep1).unwrap();
    let back = commit(
        &mut after.clone(),
        &[publish("/dir/doc.md", "v4")],
        false,
        &mut b2.clone(),
    );
    assert_eq!(back.slot.entries[0].first, 3);
    refused(&after, &back, |s| s.entries[0].first = 2);
    // Without retention the first retained version stays; with it, it moves exactly.
    refused(&after, &back, |s| s.entries[0].first = 4);
    refused(&pruned, &keep1, |s| s.entries[0].first = 2);
    // The agent is the version's agent metadata.
    refused(&after, &back, |s| {
        s.entries[0].agent = Some("someone".into())
    });

    // Archive transitions name the current version exactly and flip the flag.
    let mut probe = base.clone();
    let arch = commit(
        &mut probe,
        &[archive("/dir/doc.md", true)],
        false,
        &mut bases.clone(),
    );
    refused(&base, &arch, |s| s.entries[0].current = 2);
    refused(&base, &arch, |s| {
        s.entries[0].modified = quire_log::Timestamp(1)
    });
    refused(&base, &arch, |s| {
        s.entries[0].body_hash = Hash::of(b"other")
    });
    refused(&base, &arch, |s| {
        s.entries[0].archived = false;
        s.entries[0].op = quire_log::EntryOp::Publish;
    });
    refused(&base, &arch, |s| {
        s.entries[0].op = quire_log::EntryOp::Publish
    });
    refused(&base, &arch, |s| s.entries[0].path = path("/missing.md"));
    refused(&base, &arch, |s| s.entries[0].path = path("/live.md")); // already archived
    // The untampered slots apply.
    base.apply(&update).unwrap();
    base.apply(&create).unwrap();
    base.apply(&arch).unwrap();
}

/// A slot whose early entries apply and whose last is illegal is refused in place as a
/// whole: the documents, directory counters and hash index the early entries changed (a
/// rewrite, a new directory, both archive flips, a second touch of one path) are restored.
#[test]
fn in_place_refusal_undoes_applied_entries() {
    let mut state = WorldState::genesis(WORLD);
    let mut bases = Vec::new();
    commit(
        &mut state,
        &[
            publish("/dir/doc.md", "v1"),
            publish("/dir/other.md", "o"),
            publish("/live.md", "x"),
        ],
        false,
        &mut bases,
    );
    commit(&mut state, &[archive("/live.md", true)], false, &mut bases);
    let base = state.clone();
    let prefix = [
        publish("/dir/doc.md", "v2"),
        publish("/fresh/dir/new.md", "n"),
        archive("/dir/other.md", true),
        archive("/live.md", false),
        publish("/dir/doc.md", "v3"),
    ];
    let legal = commit(
        &mut base.clone(),
        &[&prefix[..], &[publish("/live.md", "y")]].concat(),
        false,
        &mut bases.clone(),
    );
    let last = legal.slot.entries.len() - 1;
    let tampers: [fn(&mut quire_log::Slot, usize); 5] = [
        |s, i| s.entries[i].current += 1,
        |s, i| s.entries[i].write.as_mut().unwrap().previous = Some(Hash::of(b"x")),
        |s, i| s.entries[i].path = path("/fresh/dir/new.md/below.md"),
        |s, i| s.entries[i].path = path("/fresh"),
        |s, i| s.entries[i].path = path("/dir/other.md"), // archived by an earlier entry
    ];
    for tamper in tampers {
        let mut raw = legal.slot.clone();
        tamper(&mut raw, last);
        let encoded = EncodedSlot::encode(raw, &keys::slot_key("", legal.slot.first)).unwrap();
        assert!(base.apply(&encoded).is_err());
        refused_in_place(&base, &encoded);
    }
    // The legal slot applies in place to the same state `apply` gives, and a snapshot
    // taken before does not move.
    let mut in_place = unshared(&base);
    let snapshot = in_place.clone();
    in_place.apply_in_place(&legal).unwrap();
    assert!(in_place == base.apply(&legal).unwrap());
    assert!(snapshot == base);
    in_place.check_indexes().unwrap();
    let new = in_place.doc(&path("/fresh/dir/new.md")).unwrap();
    assert_eq!(new.current, 1);
    assert!(!in_place.doc(&path("/live.md")).unwrap().archived);
    assert_eq!(in_place.doc(&path("/dir/doc.md")).unwrap().current, 3);
}

#[test]
fn state_indexes_follow_documents() {
    let mut state = WorldState::genesis(WORLD);
    let mut bases = Vec::new();
    commit(
        &mut state,
        &[
            publish("/live.md", "same"),
            publish("/gone.md", "g"),
            publish("/attic/old.md", "o"),
            publish("/nested/a/x.md", "same"),
            publish("/.hidden.md", "h"),
            publish("/notes/.scratch.md", "s"),
        ],
        true,
        &mut bases,
    );
    commit(
        &mut state,
        &[archive("/gone.md", true), archive("/attic/old.md", true)],
        true,
        &mut bases,
    );
    let names = |dir: &str, archived: bool| -> Vec<String> {
        state
            .list(dir, "", 0, archived)
            .into_iter()
            .map(|e| e.name)
            .collect()
    };
    assert_eq!(names("/", false), ["live.md", "nested"]);
    assert_eq!(names("/", true), ["attic", "gone.md", "live.md", "nested"]);
    assert_eq!(names("/nested", false), ["a"]);
    assert!(state.list("/", "", 0, false)[1].is_dir);
    assert_eq!(state.list("/", "gone.md", 1, true)[0].name, "live.md");
    assert!(state.is_dir("/") && state.is_dir("/nested/a") && state.is_dir("/notes"));
    assert!(!state.is_dir("/live.md") && !state.is_dir("/missing"));
    // Smallest live path wins for a shared body; archived documents drop out.
    let same = Hash::of(b"same");
    assert_eq!(state.lookup_hash(&same).unwrap().as_str(), "/live.md");
    let mut later = state.clone();
    commit(&mut later, &[archive("/live.md", true)], true, &mut bases);
    assert_eq!(later.lookup_hash(&same).unwrap().as_str(), "/nested/a/x.md");
    assert_eq!(later.lookup_hash(&Hash::of(b"g")), None);
    later.check_indexes().unwrap();
    // The earlier snapshot is untouched.
    assert_eq!(state.lookup_hash(&same).unwrap().as_str(), "/live.md");
}
