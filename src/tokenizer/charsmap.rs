//! SentencePiece's precompiled normalization rules (`precompiled_charsmap`), as Hugging Face
//! `tokenizers` applies them (its `Precompiled` normalizer, T5's `nmt_nfkc`).
//!
//! The blob is what SentencePiece's normalizer builder compiles: a little-endian u32, the
//! byte size of a darts-clone double-array trie; the trie's u32 units; then the replacement
//! strings, each ending in NUL. A key is a UTF-8 byte string (one character, or a character
//! and the combining marks NFKC composes with it) and its leaf holds the offset of its
//! replacement.
//!
//! `tokenizers` does not normalize as SentencePiece does (the longest key at each byte): it
//! walks the text by extended grapheme cluster, and a cluster shorter than 6 bytes is
//! replaced as a whole by the replacement of the *shortest* key that starts it, when one
//! does; otherwise (or when the cluster is longer) each character is replaced by its own
//! key's replacement, or kept. So `"ｅ\u{301}"` (full-width e, combining acute) becomes `"e"`
//! and `"\r\n"` one space. The Unigram tokenizer must see the same text, so this does the
//! same. It is written here rather than taken from the `spm_precompiled` crate `tokenizers`
//! uses, which indexes the trie unchecked and panics on a malformed charsmap (a GGUF file's
//! bytes); the grapheme clusters come from `unicode-segmentation`, as in `tokenizers`.

use super::err;
use crate::Result;
use unicode_segmentation::UnicodeSegmentation;

/// Normalized text longer than this is refused: a charsmap replacement may be long, and the
/// Unigram lattice grows with the text (NFKC expands a character to at most 18; the input
/// is at most [`super::MAX_TEXT_BYTES`]).
const MAX_NORMALIZED_BYTES: usize = 16 * super::MAX_TEXT_BYTES;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Charsmap {
    /// The blob as read (written back to GGUF as it is).
    blob: Vec<u8>,
    /// The trie's units.
    units: Vec<u32>,
    /// Where the replacement strings start in `blob`.
    strings: usize,
}

fn has_leaf(unit: u32) -> bool {
    (unit >> 8) & 1 == 1
}

fn value(unit: u32) -> usize {
    (unit & ((1 << 31) - 1)) as usize
}

fn label(unit: u32) -> u32 {
    unit & ((1 << 31) | 0xFF)
}

fn offset(unit: u32) -> usize {
    ((unit >> 10) as usize) << ((unit & (1 << 9)) >> 6)
}

impl Charsmap {
    /// Parses the blob. As `tokenizers` reads it: the trie is the whole u32 units of the
    /// stated size, and the replacement strings, the rest, must be UTF-8.
    pub(super) fn parse(blob: Vec<u8>) -> Result<Self> {
        let size = blob
            .first_chunk::<4>()
            .map(|b| u32::from_le_bytes(*b) as usize)
            .ok_or_else(|| err("precompiled_charsmap: shorter than its 4-byte header"))?;
        let n = size / 4;
        let strings = 4 + n * 4;
        if n == 0 || blob.len() < strings {
            return Err(err(format!(
                "precompiled_charsmap: a trie of {size} bytes in {} bytes",
                blob.len()
            )));
        }
        if std::str::from_utf8(&blob[strings..]).is_err() {
            return Err(err("precompiled_charsmap: the replacements are not UTF-8"));
        }
        let units = blob[4..strings]
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        Ok(Charsmap {
            blob,
            units,
            strings,
        })
    }

    /// Parses the base64 of a `tokenizer.json`'s `Precompiled` normalizer.
    pub(super) fn from_base64(text: &str) -> Result<Self> {
        Self::parse(base64(text).ok_or_else(|| err("precompiled_charsmap is not base64"))?)
    }

    pub(super) fn blob(&self) -> &[u8] {
        &self.blob
    }

    /// The replacement of the shortest key that starts `key` (the trie's first hit; keys
    /// stop at a NUL byte, as in SentencePiece).
    fn transform(&self, key: &[u8]) -> Result<Option<&str>> {
        let corrupt = || err("precompiled_charsmap: the trie points outside itself");
        let unit = |i: usize| self.units.get(i).copied().ok_or_else(corrupt);
        let mut node = offset(unit(0)?);
        for &c in key.iter().take_while(|&&c| c != 0) {
            node ^= c as usize;
            let u = unit(node)?;
            if label(u) != c as u32 {
                return Ok(None);
            }
            node ^= offset(u);
            if has_leaf(u) {
                return self.replacement(value(unit(node)?)).map(Some);
            }
        }
        Ok(None)
    }

    /// The NUL-terminated string at `at` in the replacements (to their end without a NUL).
    fn replacement(&self, at: usize) -> Result<&str> {
        let strings = &self.blob[self.strings..];
        let tail = strings.get(at..).ok_or_else(|| {
            err(format!(
                "precompiled_charsmap: replacement offset {at} is past the end"
            ))
        })?;
        let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
        // Checked UTF-8 as a whole at parse; a piece of it is UTF-8 if it starts and ends on
        // character boundaries.
        std::str::from_utf8(&tail[..end]).map_err(|_| {
            err(format!(
                "precompiled_charsmap: replacement offset {at} is inside a character"
            ))
        })
    }

    /// Appends `text` normalized as `tokenizers`' `Precompiled` does (see the module doc).
    pub(super) fn normalize(&self, text: &str, out: &mut String) -> Result<()> {
        for g in text.graphemes(true) {
            if g.len() < 6 {
                if let Some(r) = self.transform(g.as_bytes())? {
                    out.push_str(r);
                    check_len(out)?;
                    continue;
                }
            }
            for (i, c) in g.char_indices() {
                match self.transform(&g.as_bytes()[i..i + c.len_utf8()])? {
                    Some(r) => out.push_str(r),
                    None => out.push(c),
                }
            }
            check_len(out)?;
        }
        Ok(())
    }
}

fn check_len(out: &str) -> Result<()> {
    if out.len() > MAX_NORMALIZED_BYTES {
        return Err(err(format!(
            "normalized text of over {MAX_NORMALIZED_BYTES} bytes"
        )));
    }
    Ok(())
}

/// Standard base64 (`A-Z a-z 0-9 + /`), padded with `=` to a multiple of 4, as
/// `tokenizers` writes the charsmap.
fn base64(text: &str) -> Option<Vec<u8>> {
    let s = text.as_bytes();
    if !s.len().is_multiple_of(4) {
        return None;
    }
    let pad = s.iter().rev().take_while(|&&c| c == b'=').count();
    if pad > 2 {
        return None;
    }
    let digit = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    for (i, quad) in s.chunks_exact(4).enumerate() {
        let last = i + 1 == s.len() / 4;
        let used = if last { 4 - pad } else { 4 };
        let mut v = 0u32;
        for (k, &c) in quad.iter().enumerate() {
            v = (v << 6) | if k < used { digit(c)? } else { 0 };
        }
        let bytes = v.to_be_bytes();
        out.extend_from_slice(&bytes[1..used]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_decodes() {
        assert_eq!(base64("").unwrap(), b"");
        assert_eq!(base64("YQ==").unwrap(), b"a");
        assert_eq!(base64("YWI=").unwrap(), b"ab");
        assert_eq!(base64("YWJj").unwrap(), b"abc");
        assert_eq!(base64("+/8A").unwrap(), [0xfb, 0xff, 0x00]);
        for bad in ["YQ=", "Y===", "YQ=a", "YW\nJ", "YW-j"] {
            assert_eq!(base64(bad), None, "{bad:?}");
        }
    }

    /// A hand-built trie with one key, "a" -> "b": the root's children are at 256 ^ label;
    /// the child for "a" is a leaf with offset 1, so its value unit (the replacement's
    /// offset, 0) is at child ^ 1.
    fn tiny() -> Charsmap {
        let mut units = vec![0u32; 512];
        units[0] = 256 << 10;
        let child = 256 ^ 0x61;
        units[child] = 0x61 | (1 << 8) | (1 << 10);
        units[child ^ 1] = 0;
        let mut blob = ((units.len() * 4) as u32).to_le_bytes().to_vec();
        for u in &units {
            blob.extend(u.to_le_bytes());
        }
        blob.extend(b"b\0");
        Charsmap::parse(blob).unwrap()
    }

    #[test]
    fn replaces_keys() {
        let m = tiny();
        let mut out = String::new();
        m.normalize("cab\0a", &mut out).unwrap();
        assert_eq!(out, "cbb\0b");
    }

    /// The fixture's charsmap (a subset of nmt_nfkc) against `tokenizers`' Precompiled
    /// normalizer on every golden text (tools/golden/tokenizer_t5.py).
    #[test]
    fn normalizes_as_hf_tokenizers() {
        let dir = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/tokenizer/t5-unigram"
        );
        let read = |f: &str| -> serde_json::Value {
            serde_json::from_str(&std::fs::read_to_string(format!("{dir}/{f}")).unwrap()).unwrap()
        };
        let (json, golden) = (read("tokenizer.json"), read("golden.json"));
        let blob = json["normalizer"]["normalizers"][0]["precompiled_charsmap"].as_str();
        let m = Charsmap::from_base64(blob.unwrap()).unwrap();
        let texts = golden["texts"].as_array().unwrap();
        let mut want: Vec<&str> = texts.iter().map(|t| t.as_str().unwrap()).collect();
        for pair in golden["precompiled"].as_array().unwrap() {
            want[pair[0].as_u64().unwrap() as usize] = pair[1].as_str().unwrap();
        }
        let mut bad = Vec::new();
        for (t, want) in texts.iter().zip(want) {
            let mut got = String::new();
            m.normalize(t.as_str().unwrap(), &mut got).unwrap();
            if got != want {
                bad.push(format!("{t}: want {want:?} got {got:?}"));
            }
        }
        assert!(bad.is_empty(), "{}", bad.join("\n"));
        // Written back as read.
        assert_eq!(Charsmap::parse(m.blob().to_vec()).unwrap(), m);
    }

    #[test]
    fn malformed_charsmaps_are_errors() {
        assert!(Charsmap::parse(vec![1, 0]).is_err());
        assert!(Charsmap::parse(vec![0, 0, 0, 0]).is_err());
        assert!(Charsmap::parse(vec![8, 0, 0, 0, 1, 2, 3, 4]).is_err());
        let mut bad_utf8 = tiny().blob;
        bad_utf8.push(0xff);
        assert!(Charsmap::parse(bad_utf8).is_err());
        // A root pointing past the array: an error at use, not a panic.
        let mut m = tiny();
        m.units[0] = 4096 << 10;
        assert!(m.normalize("a", &mut String::new()).is_err());
        // A leaf whose value is past the replacements.
        let mut m = tiny();
        m.units[(256 ^ 0x61) ^ 1] = 100;
        assert!(m.normalize("a", &mut String::new()).is_err());
    }
}
