//! Fixed-size values the formats speak in: blake3 hashes, 128-bit identifiers (world, store,
//! operation) and whole-second UTC timestamps. Each encodes to CBOR as a byte string (hashes,
//! ids) or an unsigned integer (timestamps), never as text, so the encoding stays small and
//! has exactly one form.

use std::fmt;

use rand::RngCore;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A blake3 hash. Shown as 64 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Hash(pub [u8; 32]);

impl Hash {
    /// The hash of `bytes`.
    pub fn of(bytes: &[u8]) -> Hash {
        Hash(*blake3::hash(bytes).as_bytes())
    }

    /// Parses 64 lowercase hex digits.
    pub fn from_hex(text: &str) -> Option<Hash> {
        parse_hex::<32>(text).map(Hash)
    }

    pub fn to_hex(&self) -> String {
        hex(&self.0)
    }

    /// The content-hash form shown to clients: `blake3-<hex>`.
    pub fn content_hash(&self) -> String {
        format!("blake3-{}", self.to_hex())
    }
}

impl fmt::Display for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Hash({})", &self.to_hex()[..16])
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 15) as usize] as char);
    }
    out
}

fn parse_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let raw = text.as_bytes();
    if raw.len() != N * 2 {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; N];
    for (i, pair) in raw.chunks(2).enumerate() {
        out[i] = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

fn serialize_fixed<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_bytes(bytes)
}

fn deserialize_fixed<'de, D: Deserializer<'de>, const N: usize>(
    deserializer: D,
) -> Result<[u8; N], D::Error> {
    let buf = serde_bytes::ByteBuf::deserialize(deserializer)?;
    buf.as_slice()
        .try_into()
        .map_err(|_| serde::de::Error::invalid_length(buf.len(), &format!("{N} bytes").as_str()))
}

impl Serialize for Hash {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serialize_fixed(&self.0, serializer)
    }
}

impl<'de> Deserialize<'de> for Hash {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserialize_fixed::<D, 32>(deserializer).map(Hash)
    }
}

macro_rules! id128 {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub [u8; 16]);

        impl $name {
            /// A fresh random identifier (version-4 UUID layout).
            pub fn random(rng: &mut impl RngCore) -> Self {
                let mut raw = [0u8; 16];
                rng.fill_bytes(&mut raw);
                raw[6] = (raw[6] & 0x0f) | 0x40;
                raw[8] = (raw[8] & 0x3f) | 0x80;
                $name(raw)
            }

            /// Parses the hyphenated lowercase form `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
            pub fn parse(text: &str) -> Option<Self> {
                let raw = text.as_bytes();
                if raw.len() != 36 || [8, 13, 18, 23].iter().any(|&i| raw[i] != b'-') {
                    return None;
                }
                let compact: String = text.chars().filter(|c| *c != '-').collect();
                parse_hex::<16>(&compact).map($name)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let h = hex(&self.0);
                write!(f, "{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({self})", stringify!($name))
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serialize_fixed(&self.0, serializer)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                deserialize_fixed::<D, 16>(deserializer).map($name)
            }
        }
    };
}

id128!(
    /// Names a world; every object of the world carries it.
    WorldId
);
id128!(
    /// Names one store instance (one committer); slots carry it so a store tells its own
    /// slots from its peers'.
    StoreId
);
id128!(
    /// Names one mutation request; unique within a slot.
    OperationId
);

/// A UTC instant in whole seconds since the Unix epoch. Shown in RFC 3339
/// (`2026-01-01T00:00:00Z`).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Timestamp(pub u64);

impl Timestamp {
    pub fn seconds(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Civil-from-days (proleptic Gregorian), valid for every u64 second count we store.
        let days = (self.0 / 86_400) as i64;
        let secs = self.0 % 86_400;
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + i64::from(month <= 2);
        write!(
            f,
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
            secs / 3600,
            secs / 60 % 60,
            secs % 60
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_hex_round_trips() {
        let h = Hash::of(b"hello");
        assert_eq!(Hash::from_hex(&h.to_hex()), Some(h));
        assert_eq!(Hash::from_hex("ABC"), None);
        assert_eq!(Hash::from_hex(&h.to_hex().to_uppercase()), None);
        assert!(h.content_hash().starts_with("blake3-"));
    }

    #[test]
    fn ids_show_as_uuids() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let id = WorldId::random(&mut rng);
        let text = id.to_string();
        assert_eq!(text.len(), 36);
        assert_eq!(&text[14..15], "4");
        assert!(matches!(&text[19..20], "8" | "9" | "a" | "b"));
        assert_eq!(WorldId::parse(&text), Some(id));
        assert_eq!(WorldId::parse("nope"), None);
    }

    #[test]
    fn timestamps_print_rfc3339() {
        assert_eq!(Timestamp(0).to_string(), "1970-01-01T00:00:00Z");
        assert_eq!(Timestamp(1_767_225_600).to_string(), "2026-01-01T00:00:00Z");
        assert_eq!(Timestamp(951_825_661).to_string(), "2000-02-29T12:01:01Z");
    }

    use rand::SeedableRng;
}
