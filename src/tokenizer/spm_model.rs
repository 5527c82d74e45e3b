//! Reading SentencePiece's own serialized model (`spiece.model`, a `sentencepiece.ModelProto`
//! protobuf), which vla.cpp's Octo files carry as `octo.tokenizer.spm_model`, into the
//! Unigram tokenizer transformers' T5 conversion (`T5Converter`) makes of it.
//!
//! The protobuf is read by hand, bounds-checked, and only the fields the tokenizer needs:
//! `ModelProto.pieces` (1: each `piece` 1, `score` 2, `type` 3), `trainer_spec` (2:
//! `model_type` 3, `byte_fallback` 35, `unk_id` 40, `bos_id` 41, `eos_id` 42, `pad_id` 43) and
//! `normalizer_spec` (3: `name` 1, `precompiled_charsmap` 2, `add_dummy_prefix` 3,
//! `remove_extra_whitespaces` 4, `escape_whitespaces` 5); other fields are skipped. As in
//! proto2, an absent field has its default, a repeated singular field's last value wins and
//! a repeated message is merged. A malformed byte array (cut short, a length past the end,
//! a varint over 10 bytes, a field of the wrong wire type, a group) is an error; nothing is
//! allocated beyond what the bytes hold.
//!
//! The tokenizer is the conversion's: the pieces in order with their scores (so the ids are
//! those of the `tokenizer.json`, whose only difference is the 100 `<extra_id_N>` pieces
//! T5's tokenizer appends, absent from `spiece.model`); control and user-defined pieces, and
//! T5's special `<pad>`, `</s>`, `<unk>`, matched literally; the charsmap as `Precompiled`,
//! then `Strip(right)` and `Replace(" {2,}", "▁")`, then `Metaspace` (prepend `always`,
//! split); `</s>` appended to every text. transformers builds that pipeline whatever the
//! normalizer flags say; here, as SentencePiece and llama.cpp's `t5` metadata (read the same
//! way in gguf.rs) have it, `add_dummy_prefix: false` means no `▁` prepended and
//! `remove_extra_whitespaces: false` neither strip nor collapse. T5's model has all three
//! flags at their default (true), where the two agree. Refused: models other than Unigram,
//! byte fallback, `escape_whitespaces: false` (no `Metaspace` keeps spaces), empty or
//! repeated pieces (which SentencePiece refuses too).

use super::charsmap::Charsmap;
use super::unigram::Pipeline;
use super::{err, SpecialTokens, TokenType, Tokenizer, MAX_TOKENS};
use crate::Result;
use std::collections::HashSet;

/// `TrainerSpec.ModelType.UNIGRAM`.
const UNIGRAM: i32 = 1;

/// One field's value, by wire type.
#[derive(Clone, Copy)]
enum Field<'a> {
    /// Wire type 0.
    Varint(u64),
    /// Wire type 1.
    Fixed64,
    /// Wire type 2: strings, bytes, embedded messages.
    Bytes(&'a [u8]),
    /// Wire type 5.
    Fixed32(u32),
}

impl<'a> Field<'a> {
    fn wire_name(self) -> &'static str {
        match self {
            Field::Varint(_) => "a varint",
            Field::Fixed64 => "a fixed64",
            Field::Bytes(_) => "length-delimited",
            Field::Fixed32(_) => "a fixed32",
        }
    }

    fn wrong(self, what: &str, expected: &str) -> crate::Error {
        err(format!(
            "spiece.model: {what} is {}, expected {expected}",
            self.wire_name()
        ))
    }

    fn varint(self, what: &str) -> Result<u64> {
        match self {
            Field::Varint(v) => Ok(v),
            _ => Err(self.wrong(what, "a varint")),
        }
    }

    /// An `int32` or enum: the low 32 bits, as protobuf truncates.
    fn int32(self, what: &str) -> Result<i32> {
        Ok(self.varint(what)? as u32 as i32)
    }

    fn bool(self, what: &str) -> Result<bool> {
        Ok(self.varint(what)? != 0)
    }

    fn bytes(self, what: &str) -> Result<&'a [u8]> {
        match self {
            Field::Bytes(b) => Ok(b),
            _ => Err(self.wrong(what, "length-delimited")),
        }
    }

    fn string(self, what: &str) -> Result<&'a str> {
        std::str::from_utf8(self.bytes(what)?)
            .map_err(|_| err(format!("spiece.model: {what} is not UTF-8")))
    }

    fn float(self, what: &str) -> Result<f32> {
        match self {
            Field::Fixed32(v) => Ok(f32::from_bits(v)),
            _ => Err(self.wrong(what, "a fixed32")),
        }
    }
}

/// A message's bytes, read field by field.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// The message, for errors.
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8], what: &'static str) -> Self {
        Reader { buf, pos: 0, what }
    }

    fn cut(&self) -> crate::Error {
        err(format!(
            "spiece.model: {} is cut short at byte {} of {}",
            self.what,
            self.pos,
            self.buf.len()
        ))
    }

    fn varint(&mut self) -> Result<u64> {
        let mut v = 0u64;
        for i in 0..10 {
            let b = *self.buf.get(self.pos).ok_or_else(|| self.cut())?;
            self.pos += 1;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(err(format!(
            "spiece.model: {}: a varint of more than 10 bytes at byte {}",
            self.what, self.pos
        )))
    }

    /// The next `n` bytes, which must be there.
    fn take(&mut self, n: u64) -> Result<&'a [u8]> {
        let rest = self.buf.len() - self.pos;
        if n > rest as u64 {
            return Err(err(format!(
                "spiece.model: {}: a field of {n} bytes at byte {} with {rest} left",
                self.what, self.pos
            )));
        }
        let out = &self.buf[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(out)
    }

    /// The next field's number and value; `None` at the end of the message.
    fn next(&mut self) -> Result<Option<(u64, Field<'a>)>> {
        if self.pos == self.buf.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let number = key >> 3;
        if number == 0 || number >= 1 << 29 {
            return Err(err(format!(
                "spiece.model: {}: field number {number} is not valid",
                self.what
            )));
        }
        let value = match key & 7 {
            0 => Field::Varint(self.varint()?),
            1 => {
                self.take(8)?;
                Field::Fixed64
            }
            2 => {
                let n = self.varint()?;
                Field::Bytes(self.take(n)?)
            }
            5 => {
                let b = self.take(4)?;
                Field::Fixed32(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            }
            w => {
                return Err(err(format!(
                    "spiece.model: {}: field {number} has wire type {w} (groups are not supported)",
                    self.what
                )))
            }
        };
        Ok(Some((number, value)))
    }
}

/// `ModelProto.SentencePiece`.
struct Piece<'a> {
    piece: &'a str,
    score: f32,
    ty: TokenType,
}

/// The `TrainerSpec` fields read, with SentencePiece's defaults.
struct Trainer {
    model_type: i32,
    byte_fallback: bool,
    unk_id: i32,
    bos_id: i32,
    eos_id: i32,
    pad_id: i32,
}

impl Default for Trainer {
    fn default() -> Self {
        Trainer {
            model_type: UNIGRAM,
            byte_fallback: false,
            unk_id: 0,
            bos_id: 1,
            eos_id: 2,
            pad_id: -1,
        }
    }
}

/// The `NormalizerSpec` fields read, with SentencePiece's defaults.
struct Normalizer<'a> {
    name: &'a str,
    charsmap: &'a [u8],
    add_dummy_prefix: bool,
    remove_extra_whitespaces: bool,
    escape_whitespaces: bool,
}

impl Default for Normalizer<'_> {
    fn default() -> Self {
        Normalizer {
            name: "",
            charsmap: &[],
            add_dummy_prefix: true,
            remove_extra_whitespaces: true,
            escape_whitespaces: true,
        }
    }
}

/// The `ModelProto` fields read.
#[derive(Default)]
struct Model<'a> {
    pieces: Vec<Piece<'a>>,
    trainer: Trainer,
    normalizer: Normalizer<'a>,
}

fn piece(bytes: &[u8], index: usize) -> Result<Piece<'_>> {
    let mut r = Reader::new(bytes, "a piece");
    let mut p = Piece {
        piece: "",
        score: 0.0,
        ty: TokenType::Normal,
    };
    while let Some((number, f)) = r.next()? {
        match number {
            1 => p.piece = f.string("a piece's text")?,
            2 => p.score = f.float("a piece's score")?,
            3 => {
                let t = f.int32("a piece's type")?;
                p.ty = TokenType::from_i32(t).ok_or_else(|| {
                    err(format!(
                        "spiece.model: piece {index} has type {t}, not one of 1..=6"
                    ))
                })?;
            }
            _ => {}
        }
    }
    Ok(p)
}

fn trainer(bytes: &[u8], t: &mut Trainer) -> Result<()> {
    let mut r = Reader::new(bytes, "trainer_spec");
    while let Some((number, f)) = r.next()? {
        match number {
            3 => t.model_type = f.int32("trainer_spec.model_type")?,
            35 => t.byte_fallback = f.bool("trainer_spec.byte_fallback")?,
            40 => t.unk_id = f.int32("trainer_spec.unk_id")?,
            41 => t.bos_id = f.int32("trainer_spec.bos_id")?,
            42 => t.eos_id = f.int32("trainer_spec.eos_id")?,
            43 => t.pad_id = f.int32("trainer_spec.pad_id")?,
            _ => {}
        }
    }
    Ok(())
}

fn normalizer<'a>(bytes: &'a [u8], n: &mut Normalizer<'a>) -> Result<()> {
    let mut r = Reader::new(bytes, "normalizer_spec");
    while let Some((number, f)) = r.next()? {
        match number {
            1 => n.name = f.string("normalizer_spec.name")?,
            2 => n.charsmap = f.bytes("normalizer_spec.precompiled_charsmap")?,
            3 => n.add_dummy_prefix = f.bool("normalizer_spec.add_dummy_prefix")?,
            4 => n.remove_extra_whitespaces = f.bool("normalizer_spec.remove_extra_whitespaces")?,
            5 => n.escape_whitespaces = f.bool("normalizer_spec.escape_whitespaces")?,
            _ => {}
        }
    }
    Ok(())
}

fn model(bytes: &[u8]) -> Result<Model<'_>> {
    let mut m = Model::default();
    let mut r = Reader::new(bytes, "the model");
    while let Some((number, f)) = r.next()? {
        match number {
            1 => {
                if m.pieces.len() >= MAX_TOKENS {
                    return Err(err(format!("spiece.model: more than {MAX_TOKENS} pieces")));
                }
                let p = piece(f.bytes("a piece")?, m.pieces.len())?;
                m.pieces.push(p);
            }
            2 => trainer(f.bytes("trainer_spec")?, &mut m.trainer)?,
            3 => normalizer(f.bytes("normalizer_spec")?, &mut m.normalizer)?,
            _ => {}
        }
    }
    Ok(m)
}

/// A special id: `None` when negative (SentencePiece's "not defined").
fn special_id(id: i32) -> Option<u32> {
    u32::try_from(id).ok()
}

impl Tokenizer {
    /// Reads SentencePiece's serialized model (the bytes of a `spiece.model`) as the
    /// Unigram tokenizer transformers' T5 conversion makes of it: the same ids as its
    /// `tokenizer.json` (see the module doc, spm_model.rs). Only Unigram models without
    /// byte fallback are supported; malformed bytes are an error.
    pub fn from_spm_model(bytes: &[u8]) -> Result<Self> {
        let m = model(bytes)?;
        let t = &m.trainer;
        let n = &m.normalizer;
        if t.model_type != UNIGRAM {
            return Err(err(format!(
                "spiece.model: model_type {} is not supported (only UNIGRAM, 1: T5's)",
                t.model_type
            )));
        }
        if t.byte_fallback {
            return Err(err(
                "spiece.model: byte_fallback is not supported for Unigram",
            ));
        }
        if !n.escape_whitespaces {
            return Err(err(format!(
                "spiece.model: normalizer {:?} does not escape whitespace, which is not supported",
                n.name
            )));
        }
        let count = m.pieces.len();
        if count == 0 {
            return Err(err("spiece.model: no pieces"));
        }
        let mut seen = HashSet::with_capacity(count);
        let mut tokens = Vec::with_capacity(count);
        let mut types = Vec::with_capacity(count);
        let mut scores = Vec::with_capacity(count);
        for (i, p) in m.pieces.iter().enumerate() {
            if p.piece.is_empty() {
                return Err(err(format!("spiece.model: piece {i} is empty")));
            }
            if !seen.insert(p.piece) {
                return Err(err(format!(
                    "spiece.model: piece {i} {:?} is repeated",
                    p.piece
                )));
            }
            let ty = match p.ty {
                // T5's special tokens, added as special by transformers whatever their type.
                TokenType::Normal if matches!(p.piece, "<pad>" | "</s>" | "<unk>") => {
                    TokenType::Control
                }
                // transformers' Unigram model has every piece in its lattice.
                TokenType::Unused => TokenType::Normal,
                ty => ty,
            };
            tokens.push(p.piece.to_owned());
            types.push(ty);
            scores.push(f64::from(p.score));
        }
        let unk = special_id(t.unk_id)
            .filter(|&u| (u as usize) < count)
            .ok_or_else(|| {
                err(format!(
                    "spiece.model: unk_id {} is not a piece id (0..{count})",
                    t.unk_id
                ))
            })?;
        if types[unk as usize] == TokenType::Control {
            types[unk as usize] = TokenType::Unknown;
        }
        // T5's post-processor appends the piece `</s>` (SentencePiece's eos without one).
        let eos = match tokens.iter().position(|t| t == "</s>") {
            Some(i) => Some(i as u32),
            None => special_id(t.eos_id),
        };
        if eos.is_none() {
            return Err(err(
                "spiece.model: no `</s>` piece and no eos_id, for the end of each text",
            ));
        }
        let special = SpecialTokens {
            bos: special_id(t.bos_id),
            eos,
            pad: special_id(t.pad_id),
            unk: Some(unk),
            add_bos: false,
            add_eos: true,
        };
        let charsmap = match n.charsmap {
            [] => None,
            blob => Some(Charsmap::parse(blob.to_vec())?),
        };
        let mut pipeline = Pipeline::current(charsmap);
        pipeline.prepend = n.add_dummy_prefix;
        if !n.remove_extra_whitespaces {
            pipeline.steps.clear();
        }
        Tokenizer::new_unigram(tokens, types, scores, pipeline, special)
    }
}
