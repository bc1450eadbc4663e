//! How a run's entry is stored in the runs bucket: its JSON compressed with LZ4 (the
//! default), or the JSON as is (`serve --record-format json`).
//!
//! The entry is re-written whole at every commit (one compare-and-swap of one key), and
//! its JSON repeats itself: field names, node ids, the call's ids in the outbox, the
//! history held. LZ4 takes a mid-chain entry from about 3.4 KB to 1.4 KB for a few
//! microseconds (`mesh-bench`, `docs/figures.md`: zstd's fastest level made it 1.0 KB but
//! cost three times the node's CPU per commit). Readers take either form: a compressed
//! entry starts with [`MAGIC`], which no JSON text can, so entries written before
//! compression, or by a replica set to `json`, read as they are.

use std::borrow::Cow;
use std::str::FromStr;

use crate::shell::run::record::RunRecord;

/// The first bytes of a compressed entry (0x93 starts no UTF-8 text); then the JSON's
/// length (4 bytes, little-endian) and the LZ4 block.
pub const MAGIC: [u8; 4] = [0x93, b'L', b'Z', b'4'];

/// The most a stored entry may grow to once decompressed: far above any entry the server
/// could hold as JSON, so only a corrupt or forged entry meets it.
const MAX_PLAIN: usize = 256 << 20;

/// How a replica writes run entries (it reads both).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RecordFormat {
    /// JSON compressed with LZ4: about 40 % of the bytes.
    #[default]
    Lz4,
    /// Plain JSON: what replicas of versions before compression read, for a rolling
    /// upgrade from one of them (set it until no such replica is left).
    Json,
}

impl RecordFormat {
    /// The format's name, as `--record-format` takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            RecordFormat::Lz4 => "lz4",
            RecordFormat::Json => "json",
        }
    }
}

impl FromStr for RecordFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "lz4" => Ok(RecordFormat::Lz4),
            "json" => Ok(RecordFormat::Json),
            other => Err(format!(
                "record format '{other}' is neither 'lz4' nor 'json'"
            )),
        }
    }
}

/// The bytes to store for an entry whose JSON is `json`.
pub fn pack(json: Vec<u8>, format: RecordFormat) -> Vec<u8> {
    if format == RecordFormat::Json {
        return json;
    }
    let mut out = Vec::with_capacity(MAGIC.len() + 4 + json.len() / 2);
    out.extend_from_slice(&MAGIC);
    out.extend(lz4_flex::block::compress_prepend_size(&json));
    out
}

/// The JSON of a stored entry, either form.
pub fn unpack(stored: &[u8]) -> std::io::Result<Cow<'_, [u8]>> {
    let Some(block) = stored.strip_prefix(&MAGIC) else {
        return Ok(Cow::Borrowed(stored));
    };
    let size = block
        .first_chunk::<4>()
        .map(|b| u32::from_le_bytes(*b) as usize)
        .ok_or_else(|| std::io::Error::other("a compressed run entry without its size"))?;
    if size > MAX_PLAIN {
        return Err(std::io::Error::other(format!(
            "a compressed run entry of {size} bytes once decompressed, over the {MAX_PLAIN} allowed"
        )));
    }
    lz4_flex::block::decompress_size_prepended(block)
        .map(Cow::Owned)
        .map_err(std::io::Error::other)
}

impl RunRecord {
    /// Reads a run's entry as stored in the runs bucket (compressed or not), with
    /// `entry_bytes` set to the size of its JSON.
    pub fn from_entry(stored: &[u8]) -> serde_json::Result<RunRecord> {
        let json = unpack(stored).map_err(serde_json::Error::io)?;
        let mut record: RunRecord = serde_json::from_slice(&json)?;
        record.entry_bytes = json.len();
        Ok(record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_reads_back_from_either_form_and_compression_shrinks_it() {
        let json = serde_json::to_vec(&serde_json::json!({
            "history": vec![serde_json::json!({"event": "call_succeeded", "replica": "r-1"}); 20],
        }))
        .unwrap();
        let packed = pack(json.clone(), RecordFormat::Lz4);
        assert!(packed.starts_with(&MAGIC));
        assert!(
            packed.len() * 3 < json.len(),
            "{} of {}",
            packed.len(),
            json.len()
        );
        assert_eq!(unpack(&packed).unwrap().as_ref(), json.as_slice());
        let plain = pack(json.clone(), RecordFormat::Json);
        assert_eq!(plain, json);
        assert!(matches!(unpack(&plain).unwrap(), Cow::Borrowed(_)));
    }

    #[test]
    fn a_corrupt_or_oversized_entry_is_an_error_not_a_panic() {
        let packed = pack(
            br#"{"a": [1, 2, 3, 4, 5, 6, 7, 8]}"#.to_vec(),
            RecordFormat::Lz4,
        );
        let cut = &packed[..packed.len() - 3];
        assert!(unpack(cut).is_err());
        assert!(unpack(&MAGIC).is_err());
        assert!(RunRecord::from_entry(cut).is_err());
        let mut huge = MAGIC.to_vec();
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        huge.extend_from_slice(&[0; 16]);
        let err = unpack(&huge).unwrap_err().to_string();
        assert!(err.contains("over the"), "{err}");
    }

    #[test]
    fn formats_are_named_as_the_flag_takes_them() {
        for f in [RecordFormat::Lz4, RecordFormat::Json] {
            assert_eq!(f.as_str().parse::<RecordFormat>(), Ok(f));
        }
        let err = "gzip".parse::<RecordFormat>().unwrap_err();
        assert!(err.contains("'gzip'"), "{err}");
    }
}
