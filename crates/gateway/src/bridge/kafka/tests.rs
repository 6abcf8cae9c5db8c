//! Routing of records: header, key and format.
use super::*;

fn routed(key: Option<&str>, headers: &[(&str, &str)]) -> Option<(String, Option<String>)> {
    route(
        key.map(str::as_bytes),
        headers.iter().map(|(k, v)| (*k, Some(v.as_bytes()))),
    )
    .map(|(t, e)| (t.to_string(), e.map(|e| e.as_str().to_string())))
}

#[test]
fn records_are_routed_by_header_then_key_never_the_value() {
    let t = |t: &str, e: Option<&str>| Some((t.to_string(), e.map(str::to_string)));
    assert_eq!(routed(Some("orders"), &[]), t("orders", None));
    assert_eq!(
        routed(
            Some("key"),
            &[
                ("herald-topic", "orders"),
                ("trace-id", "x"),
                ("herald-event", "created")
            ]
        ),
        t("orders", Some("created"))
    );
    assert_eq!(
        routed(None, &[("herald-topic", "a"), ("herald-topic", "b")]),
        t("b", None)
    );
    assert_eq!(
        routed(Some("orders"), &[("herald-event", "bad event")]),
        t("orders", None)
    );
    assert_eq!(routed(None, &[]), None);
    assert_eq!(routed(Some("no spaces allowed"), &[]), None);
    assert_eq!(routed(Some("ok"), &[("herald-topic", "not valid")]), None);
    assert_eq!(route(Some(&[0xff, 0xfe][..]), std::iter::empty()), None);
}

#[test]
fn the_format_header_names_json_or_msgpack() {
    let format = |headers: &[(&str, &str)]| {
        is_msgpack(headers.iter().map(|(k, v)| (*k, Some(v.as_bytes()))))
    };
    assert_eq!(format(&[]), Ok(false));
    assert_eq!(format(&[("herald-format", "json")]), Ok(false));
    assert_eq!(format(&[("herald-format", "msgpack")]), Ok(true));
    assert_eq!(
        format(&[("herald-format", "json"), ("herald-format", "msgpack")]),
        Ok(true)
    );
    assert_eq!(format(&[("herald-format", "xml")]), Err("xml".into()));
}

#[test]
fn a_partition_s_epoch_is_stable_and_its_own() {
    assert_eq!(partition_epoch("herald", 0), partition_epoch("herald", 0));
    assert_ne!(partition_epoch("herald", 0), partition_epoch("herald", 1));
    assert_ne!(partition_epoch("herald", 0), partition_epoch("other", 0));
    assert_eq!(partition_epoch("herald", 3) & 1, 1, "an epoch is never 0");
}
