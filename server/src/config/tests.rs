use super::*;
use quire_blob::Credentials;

const FULL: &str = r#"version = 1

[listen]
quic = "0.0.0.0:6309"
http = "127.0.0.1:8080"
max_incoming_streams = 64
idle_timeout = "45s"
shutdown_timeout = "5s"
max_quic_connections = 100
max_http_connections = 200
http_header_timeout = "3s"
http_body_timeout = "7s"
http2 = true

[tls]
cert = "/etc/quire/cert.pem"
key = "key.pem"

[[worlds]]
name = "docs"
authorities = ["docs.example.com", "kb.example.com"]
read_only = true
max_documents = 100000

[worlds.backend]
kind = "bucket"
driver = "s3"
bucket = "my-bucket"
prefix = "worlds/docs"
endpoint = "http://127.0.0.1:9000"
region = "us-east-1"
world_id = "2f0c1d2e-aaaa-bbbb-cccc-0123456789ab"

[worlds.auth]
tokens_file = "tokens.toml"

[worlds.limits]
requests_per_second = 20
burst = 40
client_requests_per_second = 10

[worlds.policy]
required = true
seed_file = "policy.md"

[[worlds]]
name = "notes"
authorities = ["notes.example.com"]

[worlds.backend]
kind = "file"
root = "./notes"
"#;

fn parse(text: &str) -> Result<Config, Error> {
    Config::parse(text, "quire.toml")
}

/// A one-world file with `backend` as the backend table's body.
fn with_backend(backend: &str) -> String {
    format!("[[worlds]]\nname = \"w\"\n\n[worlds.backend]\n{backend}")
}

fn assert_refused(text: &str, line: usize, mentions: &str) {
    let error = parse(text).expect_err("configuration should be refused");
    assert_eq!(error.kind(), ErrorKind::Invalid, "{error}");
    assert_eq!(error.op(), Op::Parse);
    assert_eq!(error.key(), "quire.toml");
    assert!(
        error.detail().starts_with(&format!("line {line}: ")),
        "{:?} should name line {line}",
        error.detail()
    );
    assert!(
        error.detail().contains(mentions),
        "{:?} should mention {mentions:?}",
        error.detail()
    );
}

#[test]
fn the_embedded_default_serves_one_local_world_from_the_file_driver() {
    let config = Config::embedded_default();
    assert_eq!(config.listen, ListenConfig::default());
    assert_eq!(config.listen.quic, "127.0.0.1:6309".parse().unwrap());
    assert_eq!(config.listen.http, "127.0.0.1:6309".parse().unwrap());
    assert_eq!(config.tls, None);
    let [world] = config.worlds.as_slice() else {
        panic!("one world expected");
    };
    assert_eq!(world.name.as_str(), "local");
    assert!(world.authorities.is_empty());
    assert_eq!(
        world.backend,
        BackendConfig::Bucket {
            driver: DriverConfig::File {
                location: PathBuf::from("./data"),
                prefix: None
            },
            world_id: None,
            hedge: false,
            simulate_latency: None,
        }
    );
    assert_eq!(
        world.auth,
        AuthConfig {
            tokens_file: None,
            development_token: true
        }
    );
    assert_eq!(world.limits, LimitSettings::default());
    assert!(!world.read_only);
    assert_eq!(world.max_documents, None);
    assert_eq!(world.policy, PolicyConfig::default());
    // A lone world without authorities answers to any name.
    assert_eq!(
        config
            .world_for_authority("localhost")
            .unwrap()
            .name
            .as_str(),
        "local"
    );
    assert_eq!(
        config
            .world_for_authority("127.0.0.1")
            .unwrap()
            .name
            .as_str(),
        "local"
    );
}

#[test]
fn reads_every_setting() {
    let config = parse(FULL).unwrap();
    assert_eq!(
        config.listen,
        ListenConfig {
            quic: "0.0.0.0:6309".parse().unwrap(),
            http: "127.0.0.1:8080".parse().unwrap(),
            max_incoming_streams: NonZeroU32::new(64).unwrap(),
            idle_timeout: Duration::from_secs(45),
            shutdown_timeout: Duration::from_secs(5),
            max_quic_connections: NonZeroU32::new(100).unwrap(),
            max_http_connections: NonZeroU32::new(200).unwrap(),
            http_header_timeout: Duration::from_secs(3),
            http_body_timeout: Duration::from_secs(7),
            http2: true,
        }
    );
    assert_eq!(
        config.tls,
        Some(TlsConfig {
            cert: PathBuf::from("/etc/quire/cert.pem"),
            key: PathBuf::from("key.pem")
        })
    );
    let docs = config.world("docs").unwrap();
    assert_eq!(
        docs.authorities,
        [
            Authority::parse("docs.example.com").unwrap(),
            Authority::parse("kb.example.com").unwrap()
        ]
    );
    assert!(docs.read_only);
    assert_eq!(docs.max_documents, NonZeroU64::new(100_000));
    assert_eq!(
        docs.backend,
        BackendConfig::Bucket {
            driver: DriverConfig::S3 {
                bucket: "my-bucket".into(),
                prefix: Some("worlds/docs".into()),
                endpoint: Some("http://127.0.0.1:9000".into()),
                region: Some("us-east-1".into()),
                credentials: Credentials::Standard,
            },
            world_id: Some(WorldId::parse("2f0c1d2e-aaaa-bbbb-cccc-0123456789ab").unwrap()),
            hedge: true,
            simulate_latency: None,
        }
    );
    assert_eq!(docs.auth.tokens_file, Some(PathBuf::from("tokens.toml")));
    assert!(!docs.auth.development_token);
    assert_eq!(docs.limits.requests_per_second.get(), 20);
    assert_eq!(docs.limits.burst.get(), 40);
    assert_eq!(docs.limits.client_requests_per_second.get(), 10);
    assert_eq!(docs.limits.max_concurrent_requests.get(), 256);
    assert_eq!(
        docs.policy,
        PolicyConfig {
            enforce: true,
            required: true,
            seed_file: Some(PathBuf::from("policy.md"))
        }
    );
    let notes = config.world("notes").unwrap();
    assert_eq!(
        notes.backend,
        BackendConfig::File {
            root: PathBuf::from("./notes")
        }
    );
    assert_eq!(notes.auth, AuthConfig::default());
    assert!(config.world("other").is_none());
}

#[test]
fn routes_authorities_to_worlds_and_refuses_unknown_names() {
    let config = parse(FULL).unwrap();
    let route = |name: &str| config.world_for_authority(name).map(|w| w.name.as_str());
    assert_eq!(route("docs.example.com"), Some("docs"));
    assert_eq!(route("KB.example.com"), Some("docs"));
    assert_eq!(route("notes.example.com"), Some("notes"));
    assert_eq!(route("other.example.com"), None);
    assert_eq!(route(""), None);
    assert_eq!(route("127.0.0.1"), None);
}

#[test]
fn reads_each_bucket_driver_and_the_file_backend() {
    let cases = [
        (
            "kind = \"bucket\"\ndriver = \"memory\"\n",
            DriverConfig::Memory,
        ),
        (
            "kind = \"bucket\"\ndriver = \"file\"\nlocation = \"/srv/quire\"\nprefix = \"w1\"\n",
            DriverConfig::File {
                location: "/srv/quire".into(),
                prefix: Some("w1".into()),
            },
        ),
        (
            "kind = \"bucket\"\ndriver = \"s3\"\nbucket = \"b\"\n",
            DriverConfig::S3 {
                bucket: "b".into(),
                prefix: None,
                endpoint: None,
                region: None,
                credentials: Credentials::Standard,
            },
        ),
        (
            "kind = \"bucket\"\ndriver = \"gcs\"\nbucket = \"b\"\nendpoint = \"https://storage.example\"\n",
            DriverConfig::Gcs {
                bucket: "b".into(),
                prefix: None,
                endpoint: Some("https://storage.example".into()),
                credentials: Credentials::Standard,
            },
        ),
    ];
    for (body, driver) in cases {
        let config = parse(&with_backend(body)).unwrap();
        assert_eq!(
            config.worlds[0].backend,
            BackendConfig::Bucket {
                hedge: driver.is_remote(),
                driver,
                world_id: None,
                simulate_latency: None,
            },
            "{body}"
        );
    }
    let inline =
        parse("[[worlds]]\nname = \"w\"\nbackend = { kind = \"file\", root = \"/notes\" }\n")
            .unwrap();
    assert_eq!(
        inline.worlds[0].backend,
        BackendConfig::File {
            root: "/notes".into()
        }
    );
}

#[test]
fn unknown_keys_are_refused_with_their_line() {
    assert_refused("verison = 1\n", 1, "unknown field `verison`");
    assert_refused(
        "[listen]\nquik = \"127.0.0.1:1\"\n",
        2,
        "unknown field `quik`",
    );
    assert_refused(
        "[tls]\ncert = \"c\"\nkey = \"k\"\nchain = \"x\"\n",
        4,
        "unknown field `chain`",
    );
    let world =
        "[[worlds]]\nname = \"w\"\n\n[worlds.backend]\nkind = \"bucket\"\ndriver = \"memory\"\n";
    assert_refused(&format!("{world}nmae = \"x\"\n"), 7, "unknown field `nmae`");
    assert_refused(
        "[[worlds]]\nname = \"w\"\nreadonly = true\n[worlds.backend]\nkind = \"file\"\nroot = \"r\"\n",
        3,
        "unknown field `readonly`",
    );
    assert_refused(
        &format!("{world}\n[worlds.limits]\nburts = 3\n"),
        9,
        "unknown field `burts`",
    );
    assert_refused(
        &format!("{world}\n[worlds.auth]\ntoken_file = \"t\"\n"),
        9,
        "unknown field `token_file`",
    );
    assert_refused(
        &format!("{world}\n[worlds.policy]\nenfore = true\n"),
        9,
        "unknown field `enfore`",
    );
    assert_refused(
        &with_backend("kind = \"bucket\"\ndriver = \"file\"\nlocaton = \"x\"\n"),
        7,
        "unknown field `locaton`",
    );
}

#[test]
fn refuses_backends_that_do_not_add_up() {
    let cases: &[(&str, usize, &str)] = &[
        ("driver = \"memory\"\n", 4, "missing field `kind`"),
        ("kind = \"tape\"\n", 5, "unknown variant `tape`"),
        ("kind = \"bucket\"\n", 5, "kind = \"bucket\" needs `driver`"),
        (
            "kind = \"bucket\"\ndriver = \"floppy\"\n",
            6,
            "unknown variant `floppy`",
        ),
        (
            "kind = \"bucket\"\ndriver = \"file\"\n",
            6,
            "the file driver needs `location`",
        ),
        (
            "kind = \"bucket\"\ndriver = \"s3\"\n",
            6,
            "the s3 driver needs `bucket`",
        ),
        (
            "kind = \"bucket\"\ndriver = \"gcs\"\nregion = \"eu\"\nbucket = \"b\"\n",
            7,
            "`region` does not apply to the gcs driver",
        ),
        (
            "kind = \"bucket\"\ndriver = \"s3\"\nbucket = \"b\"\nlocation = \"x\"\n",
            8,
            "`location` does not apply to the s3 driver",
        ),
        (
            "kind = \"bucket\"\ndriver = \"memory\"\nprefix = \"p\"\n",
            7,
            "`prefix` does not apply to the memory driver",
        ),
        (
            "kind = \"bucket\"\ndriver = \"memory\"\nroot = \"r\"\n",
            7,
            "`root` does not apply",
        ),
        ("kind = \"file\"\n", 5, "kind = \"file\" needs `root`"),
        (
            "kind = \"file\"\nroot = \"r\"\ndriver = \"file\"\n",
            7,
            "`driver` does not apply to kind = \"file\"",
        ),
        (
            "kind = \"file\"\nroot = \"r\"\nworld_id = \"x\"\n",
            7,
            "`world_id` does not apply",
        ),
        (
            "kind = \"bucket\"\ndriver = \"s3\"\nbucket = \"b/path\"\n",
            7,
            "put a path in `prefix`",
        ),
        (
            "kind = \"bucket\"\ndriver = \"s3\"\nbucket = \"\"\n",
            7,
            "`bucket` must be non-empty",
        ),
        (
            "kind = \"bucket\"\ndriver = \"s3\"\nbucket = \"b\"\nendpoint = \"127.0.0.1:9000\"\n",
            8,
            "http:// or https://",
        ),
        (
            "kind = \"bucket\"\ndriver = \"file\"\nlocation = \"d\"\nprefix = \"\"\n",
            8,
            "`prefix` must be non-empty",
        ),
        (
            "kind = \"bucket\"\ndriver = \"memory\"\nworld_id = \"has space\"\n",
            7,
            "world_id \"has space\"",
        ),
        (
            "kind = \"bucket\"\ndriver = \"memory\"\nworld_id = \"\"\n",
            7,
            "world_id \"\"",
        ),
        (
            "kind = \"bucket\"\ndriver = \"file\"\nlocation = 5\n",
            7,
            "invalid type",
        ),
    ];
    for (body, line, mentions) in cases {
        assert_refused(&with_backend(body), *line, mentions);
    }
    assert_refused("[[worlds]]\nname = \"w\"\n", 1, "missing field `backend`");
}

#[test]
fn authorities_must_be_lowercase_dns_names() {
    for good in [
        "localhost",
        "docs.example.com",
        "a-b.example",
        "xn--bcher-kva.example",
        "1password.com",
        "a.b.c.d.e",
    ] {
        assert!(Authority::parse(good).is_ok(), "{good}");
    }
    let long_label = format!("{}.example", "a".repeat(64));
    let long_name = format!("{}a", "abcdefghi.".repeat(26));
    let cases: &[(&str, &str)] = &[
        ("", "is empty"),
        ("Docs.example.com", "upper-case"),
        ("docs.example.com.", "trailing dot"),
        ("*.example.com", "wildcard"),
        ("docs.example.com:6309", "without a port"),
        ("127.0.0.1", "IP address"),
        ("::1", "IP address"),
        ("[::1]", "`:`"),
        ("10.0.0.300", "all-numeric label"),
        ("bücher.example", "not ASCII"),
        ("a..b", "empty label"),
        (&long_label, "longer than 63"),
        (&long_name, "longer than 253"),
        ("-a.example", "starting or ending with `-`"),
        ("a-.example", "starting or ending with `-`"),
        ("under_score.example", "only a-z"),
        ("with space", "only a-z"),
    ];
    for (bad, mentions) in cases {
        let error = Authority::parse(bad).expect_err(bad);
        assert!(
            error.contains(mentions),
            "{bad:?}: {error:?} should mention {mentions:?}"
        );
    }
    let text = "[[worlds]]\nname = \"w\"\nauthorities = [\n  \"ok.example\",\n  \"Bad.Example\",\n]\nbackend = { kind = \"file\", root = \"r\" }\n";
    assert_refused(text, 5, "upper-case");
}

#[test]
fn several_worlds_must_route_distinctly() {
    let two = |a: &str, b: &str| {
        format!(
            "[[worlds]]\nname = \"one\"\n{a}backend = {{ kind = \"file\", root = \"a\" }}\n\n[[worlds]]\nname = \"two\"\n{b}backend = {{ kind = \"file\", root = \"b\" }}\n"
        )
    };
    assert!(
        parse(&two(
            "authorities = [\"a.example\"]\n",
            "authorities = [\"b.example\"]\n"
        ))
        .is_ok()
    );
    assert_refused(
        &two("authorities = [\"a.example\"]\n", ""),
        6,
        "world \"two\" lists no authorities",
    );
    assert_refused(
        &two(
            "authorities = [\"a.example\"]\n",
            "authorities = [\"b.example\", \"a.example\"]\n",
        ),
        8,
        "authority \"a.example\" already routes to world \"one\"",
    );
    assert_refused(
        "[[worlds]]\nname = \"w\"\nauthorities = [\"a.example\", \"a.example\"]\nbackend = { kind = \"file\", root = \"a\" }\n",
        3,
        "already routes to world \"w\"",
    );
    let same_name = "[[worlds]]\nname = \"w\"\nauthorities = [\"a.example\"]\nbackend = { kind = \"file\", root = \"a\" }\n\n[[worlds]]\nname = \"w\"\nauthorities = [\"b.example\"]\nbackend = { kind = \"file\", root = \"b\" }\n";
    assert_refused(same_name, 7, "world name \"w\" is used twice");
}

#[test]
fn refuses_bad_values_naming_their_line() {
    assert_refused("version = 2\n", 1, "version 2 is not supported");
    assert!(
        parse(&format!(
            "version = 1\n{}",
            with_backend("kind = \"file\"\nroot = \"r\"\n")
        ))
        .is_ok()
    );
    assert_refused(
        "[listen]\nquic = \"localhost\"\n",
        2,
        "invalid socket address",
    );
    assert_refused(
        "[listen]\nidle_timeout = \"forever\"\n",
        2,
        "not a duration",
    );
    assert_refused("[listen]\nmax_incoming_streams = 0\n", 2, "nonzero");
    assert_refused("[tls]\ncert = \"c\"\n", 1, "missing field `key`");
    assert_refused(
        "[[worlds]]\nname = \"Docs\"\nbackend = { kind = \"file\", root = \"r\" }\n",
        2,
        "world name \"Docs\"",
    );
    assert_refused(
        "[[worlds]]\nname = \"w\"\nmax_documents = 0\nbackend = { kind = \"file\", root = \"r\" }\n",
        3,
        "nonzero",
    );
    assert_refused("[[worlds]\n", 1, "");
    let world = with_backend("kind = \"bucket\"\ndriver = \"memory\"\n");
    assert_refused(
        &format!("{world}\n[worlds.auth]\ndevelopment_token = true\ntokens_file = \"t.toml\"\n"),
        10,
        "exclude each other",
    );
    assert_refused(
        &format!("{world}\n[worlds.policy]\nenforce = false\nrequired = true\n"),
        10,
        "needs `enforce = true`",
    );
    let error = parse("").unwrap_err();
    assert_eq!(
        error.detail(),
        "no [[worlds]]: configure at least one world"
    );
}

#[test]
fn a_world_name_may_not_be_another_worlds_authority() {
    let text = "[[worlds]]\nname = \"docs\"\nauthorities = [\"docs.example.com\"]\nbackend = { kind = \"file\", root = \"a\" }\n\n[[worlds]]\nname = \"notes\"\nauthorities = [\"docs\"]\nbackend = { kind = \"file\", root = \"b\" }\n";
    let error = parse(text).unwrap_err();
    assert!(
        error
            .detail()
            .contains("\"docs\" is also an authority of world \"notes\""),
        "{error}"
    );
}

#[test]
fn listeners_beyond_loopback_are_named() {
    let mut listen = ListenConfig::default();
    assert!(listen.beyond_loopback().is_empty());
    listen.http = "0.0.0.0:6309".parse().unwrap();
    listen.quic = "[::1]:6309".parse().unwrap();
    assert_eq!(listen.beyond_loopback(), [("HTTP", listen.http)]);
}

#[test]
fn refuses_durations_and_limits_that_cannot_work() {
    let world = with_backend("kind = \"bucket\"\ndriver = \"memory\"\n");
    for (listen, mentions) in [
        ("idle_timeout = \"0s\"", "idle_timeout"),
        ("http_header_timeout = \"0s\"", "http_header_timeout"),
        ("http_body_timeout = \"300000000000y\"", "http_body_timeout"),
        ("shutdown_timeout = \"0s\"", "shutdown_timeout"),
    ] {
        let error = parse(&format!("[listen]\n{listen}\n\n{world}")).unwrap_err();
        assert!(error.detail().contains(mentions), "{listen}: {error}");
    }
    for (limits, mentions) in [
        ("request_timeout = \"0s\"", "request_timeout"),
        ("request_timeout = \"300000000000y\"", "request_timeout"),
        (
            "max_concurrent_requests = 4\nclient_concurrent_requests = 4",
            "one client could take every slot",
        ),
    ] {
        assert_refused(
            &format!("{world}\n[worlds.limits]\n{limits}\n"),
            1,
            mentions,
        );
    }
    assert!(
        parse(&format!(
            "{world}\n[worlds.limits]\nrequest_timeout = \"1d\"\n"
        ))
        .is_ok()
    );
}

#[test]
fn errors_name_the_file() {
    let error = parse("verison = 1\n").unwrap_err();
    assert_eq!(
        error.to_string(),
        "config parse \"quire.toml\": invalid: line 1: unknown field `verison`, expected one of `version`, `listen`, `tls`, `peers`, `worlds`"
    );
}

#[test]
fn reads_the_search_section_and_defaults_it_beside_the_data() {
    let defaulted = Config::embedded_default();
    assert_eq!(
        defaulted.worlds[0].search,
        SearchConfig {
            cache_dir: PathBuf::from("search-cache/local"),
            evict_after: Duration::from_secs(1800),
            fold_every: Duration::from_secs(2),
            fold_documents: NonZeroU32::new(4096).unwrap(),
        }
    );
    let text = with_backend(
        "kind = \"file\"\nroot = \"r\"\n\n[worlds.search]\ncache_dir = \"idx\"\nevict_after = \"5m\"\nfold_every = \"250ms\"\nfold_documents = 10\n",
    );
    let mut config = parse(&text).unwrap();
    config.resolve_paths(Path::new("/srv"));
    assert_eq!(
        config.worlds[0].search,
        SearchConfig {
            cache_dir: PathBuf::from("/srv/idx"),
            evict_after: Duration::from_secs(300),
            fold_every: Duration::from_millis(250),
            fold_documents: NonZeroU32::new(10).unwrap(),
        }
    );
    let base = "kind = \"file\"\nroot = \"r\"\n\n[worlds.search]\n";
    assert_refused(
        &with_backend(&format!("{base}evict_after = \"0s\"\n")),
        9,
        "evict_after must be above zero",
    );
    assert_refused(
        &with_backend(&format!("{base}fold_every = \"soon\"\n")),
        9,
        "not a duration",
    );
    assert_refused(
        &with_backend(&format!("{base}fold_documents = 0\n")),
        9,
        "nonzero",
    );
    assert_refused(&with_backend(&format!("{base}cache = \"x\"\n")), 9, "cache");
}

#[test]
fn load_resolves_relative_paths_against_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("quire.toml");
    std::fs::write(&path, FULL).unwrap();
    let config = Config::load(&path).unwrap();
    let tls = config.tls.as_ref().unwrap();
    assert_eq!(
        tls.cert,
        PathBuf::from("/etc/quire/cert.pem"),
        "absolute stays"
    );
    assert_eq!(tls.key, dir.path().join("key.pem"));
    let docs = config.world("docs").unwrap();
    assert_eq!(docs.auth.tokens_file, Some(dir.path().join("tokens.toml")));
    assert_eq!(docs.policy.seed_file, Some(dir.path().join("policy.md")));
    assert_eq!(
        config.world("notes").unwrap().backend,
        BackendConfig::File {
            root: dir.path().join("./notes")
        }
    );

    let mut default = Config::embedded_default();
    default.resolve_paths(Path::new("/srv"));
    assert_eq!(
        default.worlds[0].backend,
        BackendConfig::Bucket {
            driver: DriverConfig::File {
                location: PathBuf::from("/srv/./data"),
                prefix: None
            },
            world_id: None,
            hedge: false,
            simulate_latency: None,
        }
    );

    let missing = dir.path().join("absent.toml");
    let error = Config::load(&missing).unwrap_err();
    assert_eq!((error.op(), error.kind()), (Op::Load, ErrorKind::Io));
    assert_eq!(error.key(), missing.display().to_string());

    std::fs::write(&path, "verison = 1\n").unwrap();
    let error = Config::load(&path).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Invalid);
    assert_eq!(error.key(), path.display().to_string());
}

#[test]
fn world_names_and_ids_follow_their_grammar() {
    for good in ["local", "a", "docs-2", "my_world", "0"] {
        assert!(WorldName::parse(good).is_ok(), "{good}");
    }
    for bad in ["", "Local", "-a", "_a", "a b", "a.b", &"a".repeat(64)] {
        assert!(WorldName::parse(bad).is_err(), "{bad}");
    }
}

/// A world id is checked when the file is read, in the form the bucket marker holds: an id
/// the store would refuse at open must not pass the configuration check.
#[test]
fn a_world_id_is_the_bucket_markers_form() {
    let id = |value: &str| {
        parse(&with_backend(&format!(
            "kind = \"bucket\"\ndriver = \"memory\"\nworld_id = \"{value}\"\n"
        )))
    };
    let good = "2f0c1d2e-aaaa-bbbb-cccc-0123456789ab";
    let config = id(good).unwrap();
    let BackendConfig::Bucket { world_id, .. } = &config.worlds[0].backend else {
        panic!("a bucket world");
    };
    assert_eq!(world_id.map(|id| id.to_string()).as_deref(), Some(good));
    for bad in [
        "x",
        "2f0c1d2e-aaaa",
        "A.b_c-9",
        "2F0C1D2E-AAAA-BBBB-CCCC-0123456789AB",
        "2f0c1d2e-aaaa-bbbb-cccc-0123456789ag",
        "2f0c1d2eaaaa-bbbb-cccc-0123456789ab0",
    ] {
        let error = id(bad).expect_err(bad).to_string();
        assert!(error.contains("is not a world id"), "{bad}: {error}");
        assert!(error.contains(&format!("{bad:?}")), "{bad}: {error}");
    }
}

#[test]
fn hedging_is_on_for_network_drivers_and_can_be_turned_off() {
    let backend = |body: &str| parse(&with_backend(body)).map(|c| c.worlds[0].backend.clone());
    let hedge = |body: &str| match backend(body).unwrap() {
        BackendConfig::Bucket { hedge, .. } => hedge,
        other => panic!("{other:?}"),
    };
    assert!(hedge(
        "kind = \"bucket\"\ndriver = \"s3\"\nbucket = \"b\"\n"
    ));
    assert!(hedge(
        "kind = \"bucket\"\ndriver = \"gcs\"\nbucket = \"b\"\n"
    ));
    assert!(!hedge(
        "kind = \"bucket\"\ndriver = \"s3\"\nbucket = \"b\"\nhedge = false\n"
    ));
    assert!(!hedge("kind = \"bucket\"\ndriver = \"memory\"\n"));
    let error = backend("kind = \"bucket\"\ndriver = \"file\"\nlocation = \"d\"\nhedge = true\n")
        .expect_err("a local driver is not hedged")
        .to_string();
    assert!(error.contains("`hedge` does not apply"), "{error}");
}

#[test]
fn a_bucket_world_may_name_a_simulated_latency_for_benchmarks() {
    let world = |extra: &str| {
        format!(
            "[[worlds]]\nname = \"w\"\n\n[worlds.backend]\nkind = \"bucket\"\ndriver = \"s3\"\nbucket = \"b\"\n{extra}"
        )
    };
    let config = parse(&world("simulate_latency = \"real-gcs\"\n")).unwrap();
    assert!(matches!(
        config.worlds[0].backend,
        BackendConfig::Bucket {
            simulate_latency: Some(SimulatedLatency::RealGcs),
            ..
        }
    ));
    let error = parse(&world("simulate_latency = \"lunar\"\n")).expect_err("unknown");
    assert!(error.detail().contains("real-gcs"), "{error}");
    let file = "[[worlds]]\nname = \"w\"\n\n[worlds.backend]\nkind = \"file\"\nroot = \"/n\"\nsimulate_latency = \"real-gcs\"\n";
    let error = parse(file).expect_err("a file backend has no bucket");
    assert!(error.detail().contains("simulate_latency"), "{error}");
}

#[test]
fn peers_parse_with_defaults_and_resolve_their_paths() {
    let text = format!(
        "[peers]\naddresses = [\"10.0.0.7:6310\", \"peer.example:7000\"]\ndns = \"quire-peers.internal:6310\"\ncert = \"replica.pem\"\nkey = \"/etc/replica-key.pem\"\n\n{}",
        with_backend("kind = \"file\"\nroot = \"notes\"\n")
    );
    let mut config = parse(&text).unwrap();
    let peers = config.peers.clone().expect("[peers] parsed");
    assert_eq!(peers.listen, DEFAULT_PEER_ADDRESS);
    assert_eq!(peers.addresses, ["10.0.0.7:6310", "peer.example:7000"]);
    assert_eq!(peers.dns.as_deref(), Some("quire-peers.internal:6310"));
    assert_eq!(peers.resolve_every, Duration::from_secs(30));
    config.resolve_paths(Path::new("/srv/quire"));
    let peers = config.peers.unwrap();
    assert_eq!(peers.cert, Path::new("/srv/quire/replica.pem"));
    assert_eq!(peers.key, Path::new("/etc/replica-key.pem"));
    assert_eq!(parse(FULL).unwrap().peers, None);
}

#[test]
fn bad_peers_are_refused() {
    let world = with_backend("kind = \"file\"\nroot = \"notes\"\n");
    for (peers, mentions) in [
        (
            "addresses = [\"10.0.0.7\"]\ncert = \"c\"\nkey = \"k\"\n",
            "host:port",
        ),
        ("dns = \"name:0\"\ncert = \"c\"\nkey = \"k\"\n", "host:port"),
        (
            "resolve_every = \"0s\"\ncert = \"c\"\nkey = \"k\"\n",
            "resolve_every",
        ),
        ("cert = \"c\"\n", "missing field `key`"),
        ("cert = \"c\"\nkey = \"k\"\nport = 1\n", "unknown field"),
    ] {
        let error = parse(&format!("[peers]\n{peers}\n{world}")).expect_err(peers);
        assert!(error.detail().contains(mentions), "{peers}: {error}");
    }
}
