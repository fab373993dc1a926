//! A reader for the canonical CBOR of the hottest object, the shard, without building a
//! generic value or re-encoding it: every item must already be in the one spelling the
//! encoder writes (shortest heads, definite lengths, text as UTF-8, struct keys in
//! declaration order, map keys strictly increasing), so accepting an input here is the same
//! as decoding it and re-encoding it to the same bytes.

/// CBOR major types this reader meets.
const UINT: u8 = 0;
const BYTES: u8 = 2;
const TEXT: u8 = 3;
const ARRAY: u8 = 4;
const MAP: u8 = 5;
const FALSE: u8 = 0xf4;
const TRUE: u8 = 0xf5;
const NULL: u8 = 0xf6;

/// A cursor over canonical CBOR bytes; every read refuses a non-canonical spelling.
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    rest: &'a [u8],
}

pub(crate) type Read<T> = Result<T, String>;

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { rest: bytes }
    }

    /// Fails unless every byte was read.
    pub(crate) fn finish(&self) -> Read<()> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(format!("{} trailing bytes", self.rest.len()))
        }
    }

    fn take(&mut self, n: usize) -> Read<&'a [u8]> {
        if self.rest.len() < n {
            return Err("malformed CBOR: truncated".into());
        }
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(head)
    }

    fn peek(&self) -> Read<u8> {
        self.rest
            .first()
            .copied()
            .ok_or_else(|| "malformed CBOR: truncated".to_owned())
    }

    /// A head of `major` type with its argument in the shortest form.
    fn head(&mut self, major: u8) -> Read<u64> {
        let initial = self.take(1)?[0];
        if initial >> 5 != major {
            return Err(format!(
                "malformed CBOR: major type {} where {major} was expected",
                initial >> 5
            ));
        }
        let info = initial & 0x1f;
        let (value, shortest) = match info {
            0..=23 => (u64::from(info), true),
            24 => {
                let v = u64::from(self.take(1)?[0]);
                (v, v >= 24)
            }
            25 => {
                let b = self.take(2)?;
                let v = u64::from(u16::from_be_bytes([b[0], b[1]]));
                (v, v > 0xff)
            }
            26 => {
                let b = self.take(4)?;
                let v = u64::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
                (v, v > 0xffff)
            }
            27 => {
                let b = self.take(8)?;
                let v = u64::from_be_bytes(b.try_into().expect("eight bytes"));
                (v, v > 0xffff_ffff)
            }
            _ => return Err("not in canonical encoding".into()),
        };
        if !shortest {
            return Err("not in canonical encoding".into());
        }
        Ok(value)
    }

    pub(crate) fn uint(&mut self) -> Read<u64> {
        self.head(UINT)
    }

    /// A length that must fit the input (so a hostile length allocates nothing).
    fn len(&mut self, major: u8) -> Read<usize> {
        let n = self.head(major)?;
        usize::try_from(n)
            .ok()
            .filter(|n| *n <= self.rest.len())
            .ok_or_else(|| "malformed CBOR: length beyond the input".to_owned())
    }

    pub(crate) fn array(&mut self) -> Read<usize> {
        self.len(ARRAY)
    }

    pub(crate) fn map(&mut self) -> Read<usize> {
        self.len(MAP)
    }

    pub(crate) fn text(&mut self) -> Read<&'a str> {
        let n = self.len(TEXT)?;
        std::str::from_utf8(self.take(n)?).map_err(|_| "malformed CBOR: text is not UTF-8".into())
    }

    pub(crate) fn bytes(&mut self) -> Read<&'a [u8]> {
        let n = self.len(BYTES)?;
        self.take(n)
    }

    pub(crate) fn hash(&mut self) -> Read<quire_log::Hash> {
        let b = self.bytes()?;
        b.try_into()
            .map(quire_log::Hash)
            .map_err(|_| format!("a hash of {} bytes", b.len()))
    }

    pub(crate) fn bool(&mut self) -> Read<bool> {
        match self.take(1)?[0] {
            FALSE => Ok(false),
            TRUE => Ok(true),
            _ => Err("malformed CBOR: a boolean was expected".into()),
        }
    }

    /// Consumes a null if one is next.
    pub(crate) fn null(&mut self) -> Read<bool> {
        if self.peek()? == NULL {
            self.rest = &self.rest[1..];
            Ok(true)
        } else {
            Ok(false)
        }
    }

    /// A struct field's key, which must be `name`.
    pub(crate) fn key(&mut self, name: &str) -> Read<()> {
        let key = self.text()?;
        if key != name {
            return Err(format!("field {key:?} where {name:?} was expected"));
        }
        Ok(())
    }

    /// A map of text to text with strictly increasing keys, as its pairs (borrowed from the
    /// input, so nothing is allocated per pair).
    pub(crate) fn text_pairs(&mut self, out: &mut Vec<(&'a str, &'a str)>) -> Read<()> {
        let n = self.map()?;
        out.clear();
        for _ in 0..n {
            let key = self.text()?;
            if out.last().is_some_and(|(p, _)| *p >= key) {
                return Err("not in canonical encoding".into());
            }
            out.push((key, self.text()?));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_every_other_spelling() {
        assert_eq!(Reader::new(&[0x17]).uint(), Ok(23));
        assert_eq!(Reader::new(&[0x18, 0x18]).uint(), Ok(24));
        assert!(Reader::new(&[0x18, 0x17]).uint().is_err());
        assert!(Reader::new(&[0x19, 0x00, 0xff]).uint().is_err());
        assert!(Reader::new(&[0x1a, 0, 0, 0xff, 0xff]).uint().is_err());
        assert!(
            Reader::new(&[0x1b, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff])
                .uint()
                .is_err()
        );
        assert!(Reader::new(&[0x1f]).uint().is_err());
        // Indefinite-length array, and a length beyond the input.
        assert!(Reader::new(&[0x9f, 0xff]).array().is_err());
        assert!(Reader::new(&[0x85, 0x01]).array().is_err());
        // Text that is not UTF-8; bytes where text is expected.
        assert!(Reader::new(&[0x61, 0xff]).text().is_err());
        assert!(Reader::new(&[0x41, b'a']).text().is_err());
        // Map keys out of order or repeated.
        let ordered = [0xa2, 0x61, b'a', 0x60, 0x61, b'b', 0x60];
        let reversed = [0xa2, 0x61, b'b', 0x60, 0x61, b'a', 0x60];
        let repeated = [0xa2, 0x61, b'a', 0x60, 0x61, b'a', 0x60];
        let mut pairs = Vec::new();
        Reader::new(&ordered).text_pairs(&mut pairs).unwrap();
        assert_eq!(pairs, [("a", ""), ("b", "")]);
        assert!(Reader::new(&reversed).text_pairs(&mut pairs).is_err());
        assert!(Reader::new(&repeated).text_pairs(&mut pairs).is_err());
        assert!(Reader::new(&[0x01, 0x00]).finish().is_err());
    }
}
