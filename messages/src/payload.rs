//! How JSON values travel in parts (see `docs/protocol.md`): a value that is not an object
//! is wrapped as `{"value": ...}` in a DataPart marked `mesh_wrapped`, and a large value is
//! stored in the JetStream object store and referred to by a FilePart whose URI is
//! `nats-object://{bucket}/{name}`. Pure functions; reading and writing the store is the
//! caller's business.

use serde_json::{Map, Value};

use crate::a2a::{JsonObject, Part};

/// Part metadata key marking a DataPart whose `data` is `{"value": <non-object>}`. Only the
/// boolean `true` counts: a missing key, `false` or a non-boolean means "not wrapped".
pub const MESH_WRAPPED: &str = "mesh_wrapped";

/// The URI scheme of object-store references, with its `//`.
pub const OBJECT_SCHEME: &str = "nats-object://";

/// Media type given to the FileParts of stored JSON artifacts.
pub const JSON_MIME: &str = "application/json";

/// The DataPart carrying `value`: the object itself, or `{"value": value}` with metadata
/// `mesh_wrapped: true` when `value` is not an object (a DataPart's `data` must be one).
pub fn wrap(value: Value) -> Part {
    match value {
        Value::Object(data) => Part::data(data),
        other => {
            let mut data = Map::new();
            data.insert("value".into(), other);
            let mut metadata = Map::new();
            metadata.insert(MESH_WRAPPED.into(), Value::Bool(true));
            Part::Data {
                data,
                metadata: Some(metadata),
            }
        }
    }
}

/// Whether part metadata marks the content as wrapped (see [`MESH_WRAPPED`]). FileParts
/// carry the mark too when the stored artifact is a wrapped value.
pub fn is_wrapped(metadata: Option<&JsonObject>) -> bool {
    metadata
        .and_then(|m| m.get(MESH_WRAPPED))
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// The value a DataPart carries: `data.value` when wrapped (`null` when that is missing),
/// else `data` as an object.
pub fn unwrap_data(data: &JsonObject, metadata: Option<&JsonObject>) -> Value {
    if is_wrapped(metadata) {
        data.get("value").cloned().unwrap_or(Value::Null)
    } else {
        Value::Object(data.clone())
    }
}

/// [`unwrap_data`] of a DataPart; `None` for text and file parts.
pub fn part_value(part: &Part) -> Option<Value> {
    match part {
        Part::Data { data, metadata } => Some(unwrap_data(data, metadata.as_ref())),
        _ => None,
    }
}

/// The object-store key of version `version` of artifact `name`: `{name}@v{version}`.
pub fn version_key(name: &str, version: u64) -> String {
    format!("{name}@v{version}")
}

/// `(name, version)` of a key made by [`version_key`]; `None` for any other key.
pub fn split_version_key(key: &str) -> Option<(&str, u64)> {
    let (name, v) = key.rsplit_once("@v")?;
    let version = v
        .parse()
        .ok()
        .filter(|_| v.bytes().all(|b| b.is_ascii_digit()))?;
    (!name.is_empty()).then_some((name, version))
}

/// `nats-object://{bucket}/{name}`.
pub fn object_uri(bucket: &str, name: &str) -> String {
    format!("{OBJECT_SCHEME}{bucket}/{name}")
}

/// `(bucket, name)` of `nats-object://{bucket}/{name}`, or `None` when `uri` is not one.
/// The bucket ends at the first `/`; the name may contain more. Neither may be empty.
pub fn parse_object_uri(uri: &str) -> Option<(&str, &str)> {
    let (bucket, name) = uri.strip_prefix(OBJECT_SCHEME)?.split_once('/')?;
    (!bucket.is_empty() && !name.is_empty()).then_some((bucket, name))
}

/// `(bucket, name)` of an artifact reference as a `workflow_node_result`'s `artifact_name`
/// or a FilePart may give it: a `nats-object://` URI, or a bare object name, which is in
/// `default_bucket` (the namespace's artifact bucket). `None` for an empty reference or a
/// URI of another scheme.
pub fn object_ref<'a>(reference: &'a str, default_bucket: &'a str) -> Option<(&'a str, &'a str)> {
    if reference.starts_with(OBJECT_SCHEME) {
        parse_object_uri(reference)
    } else if reference.contains("://") || reference.is_empty() {
        None
    } else {
        Some((default_bucket, reference))
    }
}

/// The FilePart referring to the JSON artifact `name` stored in `bucket`; the file's name
/// is the object name, so a reader that ignores the URI still sees what it is.
pub fn artifact_part(bucket: &str, name: &str) -> Part {
    Part::file_uri(
        object_uri(bucket, name),
        Some(name.to_owned()),
        Some(JSON_MIME.to_owned()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn non_objects_are_wrapped_and_unwrapped() {
        for v in [
            json!(3),
            json!("s"),
            json!([1, 2]),
            json!(null),
            json!({"a": 1}),
            json!({"value": 1}),
        ] {
            let part = wrap(v.clone());
            let Part::Data { data, metadata } = &part else {
                panic!("wrap gives a DataPart")
            };
            assert_eq!(is_wrapped(metadata.as_ref()), !v.is_object());
            assert_eq!(unwrap_data(data, metadata.as_ref()), v);
            assert_eq!(part_value(&part), Some(v));
        }
    }

    #[test]
    fn only_a_true_mark_unwraps() {
        let data = json!({"value": 1}).as_object().cloned().unwrap();
        for meta in [
            json!({}),
            json!({"mesh_wrapped": false}),
            json!({"mesh_wrapped": "yes"}),
        ] {
            let meta = meta.as_object().cloned();
            assert!(!is_wrapped(meta.as_ref()));
            assert_eq!(unwrap_data(&data, meta.as_ref()), json!({"value": 1}));
        }
        // Marked but without a value: null, not a panic.
        let meta = json!({"mesh_wrapped": true}).as_object().cloned();
        assert_eq!(unwrap_data(&JsonObject::new(), meta.as_ref()), Value::Null);
        assert_eq!(part_value(&Part::text("t")), None);
    }

    #[test]
    fn object_uris_round_trip() {
        let uri = object_uri("mesh_artifacts", "t1/out.json");
        assert_eq!(uri, "nats-object://mesh_artifacts/t1/out.json");
        assert_eq!(
            parse_object_uri(&uri),
            Some(("mesh_artifacts", "t1/out.json"))
        );
        for bad in [
            "http://x/y",
            "nats-object://",
            "nats-object://b",
            "nats-object://b/",
            "nats-object:///n",
            "mesh_artifacts/n",
        ] {
            assert_eq!(parse_object_uri(bad), None, "{bad}");
        }
    }

    #[test]
    fn object_refs_may_be_bare_names_in_the_default_bucket() {
        assert_eq!(
            object_ref("nats-object://b/n.json", "d"),
            Some(("b", "n.json"))
        );
        assert_eq!(object_ref("in.json", "d"), Some(("d", "in.json")));
        assert_eq!(object_ref("nats-object://b", "d"), None);
        assert_eq!(object_ref("https://x/y", "d"), None);
        assert_eq!(object_ref("", "d"), None);
    }

    #[test]
    fn artifact_parts_name_the_object() {
        let Part::File { file, .. } = artifact_part("b", "x/y.json") else {
            panic!("a FilePart")
        };
        assert_eq!(file.uri.as_deref(), Some("nats-object://b/x/y.json"));
        assert_eq!(file.name.as_deref(), Some("x/y.json"));
        assert_eq!(file.mime_type.as_deref(), Some(JSON_MIME));
    }
}
