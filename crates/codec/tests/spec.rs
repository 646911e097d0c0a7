//! The spec grammar: every accepted spelling, many invalid ones, display/parse round trip.

use proptest::prelude::*;
use squeezefs_codec::*;

fn fixed(alg: Algorithm, level: i32) -> Spec {
    Spec::Fixed(Codec { alg, level })
}

fn auto(min: Codec, max: Codec) -> Spec {
    Spec::Auto { min, max }
}

#[test]
fn every_accepted_form_parses_to_its_meaning() {
    use Algorithm::*;
    let cases: Vec<(&str, Spec)> = vec![
        ("none", Spec::Off),
        ("off", Spec::Off),
        ("OFF", Spec::Off),
        ("  none ", Spec::Off),
        // zstd: ours, btrfs, ZFS
        ("zstd", fixed(Zstd, 3)),
        ("zstd:0", fixed(Zstd, 3)),
        ("zstd:1", fixed(Zstd, 1)),
        ("zstd:19", fixed(Zstd, 19)),
        ("zstd:22", fixed(Zstd, 22)),
        ("zstd:-5", fixed(Zstd, -5)),
        ("zstd:-131072", fixed(Zstd, -131072)),
        ("zstd-19", fixed(Zstd, 19)),
        ("zstd-1", fixed(Zstd, 1)),
        ("zstd-fast", fixed(Zstd, -1)),
        ("zstd-fast-10", fixed(Zstd, -10)),
        ("zstd-fast-1000", fixed(Zstd, -1000)),
        ("zstd:fast=7", fixed(Zstd, -7)),
        ("ZSTD:9", fixed(Zstd, 9)),
        // deflate: btrfs zlib, ZFS gzip, ours
        ("zlib", fixed(Deflate, 3)),
        ("zlib3", fixed(Deflate, 3)),
        ("zlib9", fixed(Deflate, 9)),
        ("zlib:3", fixed(Deflate, 3)),
        ("zlib:0", fixed(Deflate, 3)),
        ("zlib:12", fixed(Deflate, 12)),
        ("gzip", fixed(Deflate, 6)),
        ("gzip-9", fixed(Deflate, 9)),
        ("gzip-1", fixed(Deflate, 1)),
        ("gzip:4", fixed(Deflate, 4)),
        ("deflate", fixed(Deflate, 6)),
        ("deflate:12", fixed(Deflate, 12)),
        // lz4: ZFS, thesis, ours
        ("lz4", fixed(Lz4, 1)),
        ("lz4:fast=1", fixed(Lz4, 1)),
        ("lz4:fast=17", fixed(Lz4, 17)),
        ("lz4fast-17", fixed(Lz4, 17)),
        ("lz4-fast-3", fixed(Lz4, 3)),
        ("lz4:fast=65537", fixed(Lz4, 65537)),
        ("lz4hc", fixed(Lz4Hc, 9)),
        ("lz4hc:9", fixed(Lz4Hc, 9)),
        ("lz4hc:1", fixed(Lz4Hc, 1)),
        ("lz4hc-12", fixed(Lz4Hc, 12)),
        // adaptive
        ("auto", Spec::Auto { min: AUTO_DEFAULT_MIN, max: AUTO_DEFAULT_MAX }),
        // bare numbers are zstd levels (the form before bounds took codec names)
        ("auto:-5..9", auto(Codec { alg: Zstd, level: -5 }, Codec { alg: Zstd, level: 9 })),
        ("auto:1..19", auto(Codec { alg: Zstd, level: 1 }, Codec { alg: Zstd, level: 19 })),
        ("auto:3..3", auto(Codec { alg: Zstd, level: 3 }, Codec { alg: Zstd, level: 3 })),
        // any fixed codec in any spelling
        ("auto:lz4fast-20..zstd:9", auto(Codec { alg: Lz4, level: 20 }, Codec { alg: Zstd, level: 9 })),
        ("auto:zstd:1..zstd:15", auto(Codec { alg: Zstd, level: 1 }, Codec { alg: Zstd, level: 15 })),
        ("auto:zstd-fast-5..gzip-6", auto(Codec { alg: Zstd, level: -5 }, Codec { alg: Deflate, level: 6 })),
        ("auto:zstd:-5..zstd-19", auto(Codec { alg: Zstd, level: -5 }, Codec { alg: Zstd, level: 19 })),
        ("AUTO:LZ4..ZSTD:3", auto(Codec { alg: Lz4, level: 1 }, Codec { alg: Zstd, level: 3 })),
        ("auto:lz4..lz4hc:9", auto(Codec { alg: Lz4, level: 1 }, Codec { alg: Lz4Hc, level: 9 })),
        ("auto:zstd:3..zstd:3", auto(Codec { alg: Zstd, level: 3 }, Codec { alg: Zstd, level: 3 })),
        // an omitted bound is the default one
        ("auto:..zstd:9", auto(AUTO_DEFAULT_MIN, Codec { alg: Zstd, level: 9 })),
        ("auto:lz4..", auto(Codec { alg: Lz4, level: 1 }, AUTO_DEFAULT_MAX)),
        ("auto:lz4:fast=64..zstd:15", auto(AUTO_DEFAULT_MIN, AUTO_DEFAULT_MAX)),
        ("qos:50", Spec::Qos { mb_per_s: 50 }),
        ("qos-50", Spec::Qos { mb_per_s: 50 }),
        ("qos=200", Spec::Qos { mb_per_s: 200 }),
    ];
    for (input, want) in cases {
        let got: Spec = input.parse().unwrap_or_else(|e| panic!("{input:?}: {e}"));
        assert_eq!(got, want, "{input:?}");
    }
}

#[cfg(feature = "lzo")]
#[test]
fn lzo_parses_when_built_in() {
    assert_eq!("lzo".parse::<Spec>().unwrap(), fixed(Algorithm::Lzo, 0));
}

#[cfg(not(feature = "lzo"))]
#[test]
fn lzo_without_the_feature_names_the_feature() {
    let e = "lzo".parse::<Spec>().unwrap_err();
    assert!(matches!(e, SpecError::NotBuiltIn { alg: Algorithm::Lzo }));
    let msg = e.to_string();
    assert!(msg.contains("--features lzo"), "{msg}");
}

#[test]
fn display_prints_the_canonical_form() {
    let cases = [
        ("zstd", "zstd:3"),
        ("zstd-fast-10", "zstd:-10"),
        ("zlib", "zlib:3"),
        ("gzip-9", "zlib:9"),
        ("zlib9", "zlib:9"),
        ("lz4fast-17", "lz4:fast=17"),
        ("lz4", "lz4"),
        ("lz4:fast=1", "lz4"),
        ("lz4hc", "lz4hc:9"),
        ("off", "none"),
        ("auto", "auto"),
        ("auto:-5..9", "auto:zstd:-5..zstd:9"),
        ("auto:lz4fast-20..zstd:9", "auto:lz4:fast=20..zstd:9"),
        ("auto:zstd-fast-5..gzip-6", "auto:zstd:-5..zlib:6"),
        ("auto:..zstd-9", "auto:..zstd:9"),
        ("auto:lz4..", "auto:lz4.."),
        ("auto:lz4..zstd-15", "auto:lz4.."),
        ("auto:lz4fast-64..zstd:15", "auto"),
        ("qos-50", "qos:50"),
    ];
    for (input, canonical) in cases {
        assert_eq!(input.parse::<Spec>().unwrap().to_string(), canonical, "{input}");
    }
}

#[test]
fn invalid_specs_name_the_problem_and_the_accepted_forms() {
    let cases = [
        "",
        "   ",
        "zstd:23",
        "zstd:100",
        "zstd-23",
        "zstd:-131073",
        "zstd-fast-0",
        "zstd-fast-131073",
        "zstd:",
        "zstd:x",
        "zstd:3x",
        "zstd:+3",
        "zstd::3",
        "zstd-",
        "zstd-fast-",
        "zstd-fast-x",
        "zstd--3",
        "zstd3",
        "zstd 3",
        "zlib:13",
        "zlib13",
        "zlib:-1",
        "zlib:",
        "zlibx",
        "gzip-13",
        "gzip-",
        "gzip3x",
        "deflate:99",
        "lz4:9",
        "lz4:fast=0",
        "lz4:fast=65538",
        "lz4:fast=",
        "lz4fast-",
        "lz4fast",
        "lz4hc:0",
        "lz4hc:13",
        "lz4hc:x",
        "lz4x",
        "lzo:1",
        "lzma",
        "brotli:5",
        "snappy",
        "auto:",
        "auto:9..1",
        "auto:1..23",
        "auto:1-9",
        "auto:0..5",
        "auto:a..b",
        "auto5",
        "auto:..",
        "auto:zstd:3",
        "auto:zstd:9..lz4",
        "auto:zlib:9..zlib:1",
        "auto:none..zstd:3",
        "auto:zstd:3..off",
        "auto:qos:5..zstd:3",
        "auto:auto..zstd:3",
        "auto:lz4..zstd:99",
        "auto:lz4...zstd:3",
        "auto:lz4..zstd:3..zstd:9",
        "auto:lz4 ..zstd:3x",
        "qos",
        "qos:",
        "qos:0",
        "qos:-5",
        "qos:2000000",
        "qos:fast",
        "none:3",
        "off-1",
        "zstd:99999999999999999999",
        "zstd,lz4",
        "\u{e9}zstd",
        "zstd:1..5",
    ];
    assert!(cases.len() >= 30);
    for input in cases {
        let err = input.parse::<Spec>().expect_err(input);
        let msg = err.to_string();
        assert!(msg.len() > 20, "{input:?}: terse message {msg:?}");
        let names_forms = msg.contains(ACCEPTED_FORMS) || matches!(err, SpecError::NotBuiltIn { .. });
        assert!(names_forms, "{input:?}: {msg}");
    }
}

#[test]
fn level_errors_name_the_range() {
    let msg = "zstd:23".parse::<Spec>().unwrap_err().to_string();
    assert!(msg.contains("level 23") && msg.contains("1..=22"), "{msg}");
    let msg = "lz4hc:13".parse::<Spec>().unwrap_err().to_string();
    assert!(msg.contains("1..=12"), "{msg}");
    let msg = "lzma".parse::<Spec>().unwrap_err().to_string();
    assert!(msg.contains("\"lzma\""), "{msg}");
}

#[test]
fn auto_range_errors_say_what_is_wrong() {
    let msg = "auto:zstd:9..lz4".parse::<Spec>().unwrap_err().to_string();
    assert!(msg.contains("zstd:9..lz4") && msg.contains("faster codec first"), "{msg}");
    let msg = "auto:none..zstd:3".parse::<Spec>().unwrap_err().to_string();
    assert!(msg.contains("\"none\"") && msg.contains("not a fixed codec"), "{msg}");
    let msg = "auto:..".parse::<Spec>().unwrap_err().to_string();
    assert!(msg.contains("write auto"), "{msg}");
    let msg = "auto:0..5".parse::<Spec>().unwrap_err().to_string();
    assert!(msg.contains("level 0"), "{msg}");
    let msg = "auto:lz4..zstd:99".parse::<Spec>().unwrap_err().to_string();
    assert!(msg.contains("level 99"), "{msg}");
}

#[test]
fn codec_lists_expand_ranges() {
    let v = Spec::parse_list("zstd:1..3,lz4,none").unwrap();
    let s: Vec<String> = v.iter().map(|c| c.to_string()).collect();
    assert_eq!(s, ["zstd:1", "zstd:2", "zstd:3", "lz4", "none"]);
    let v = Spec::parse_list("zstd:-2..2").unwrap();
    assert_eq!(v.iter().map(|c| c.level).collect::<Vec<_>>(), [-2, -1, 1, 2]);
    let v = Spec::parse_list("lz4:fast=1..3, zlib:9..7 ,lz4hc:12").unwrap();
    let s: Vec<String> = v.iter().map(|c| c.to_string()).collect();
    assert_eq!(s, ["lz4", "lz4:fast=2", "lz4:fast=3", "zlib:9", "zlib:8", "zlib:7", "lz4hc:12"]);
    let v = Spec::parse_list("zstd-fast-1..3").unwrap();
    assert_eq!(v.iter().map(|c| c.level).collect::<Vec<_>>(), [-1, -2, -3]);
    assert_eq!(Spec::parse_list("zstd:1..15").unwrap().len(), 15);
}

#[test]
fn bad_codec_lists_are_rejected() {
    for bad in [
        "",
        "zstd:1..",
        "zstd:1..30",
        "zstd:1..lz4",
        "zstd:1..3,,lz4",
        "auto",
        "qos:5",
        "lz4:fast=1..65537",
        "zstd..3",
        "lz4hc:1..zstd:3",
    ] {
        assert!(Spec::parse_list(bad).is_err(), "{bad:?}");
    }
}

fn any_codec() -> impl Strategy<Value = Codec> {
    prop_oneof![
        (ZSTD_MIN_LEVEL..=ZSTD_MAX_LEVEL)
            .prop_filter("0 is not a level", |l| *l != 0)
            .prop_map(|l| Codec { alg: Algorithm::Zstd, level: l }),
        (1..=LZ4_MAX_ACCELERATION).prop_map(|l| Codec { alg: Algorithm::Lz4, level: l }),
        (1..=LZ4HC_MAX_LEVEL).prop_map(|l| Codec { alg: Algorithm::Lz4Hc, level: l }),
        (1..=DEFLATE_MAX_LEVEL).prop_map(|l| Codec { alg: Algorithm::Deflate, level: l }),
    ]
}

fn any_spec() -> impl Strategy<Value = Spec> {
    prop_oneof![
        Just(Spec::Off),
        any_codec().prop_map(Spec::Fixed),
        (any_codec(), any_codec()).prop_map(|(a, b)| {
            // the faster codec first, as the grammar requires
            if nominal::nominal(a).compress_mb_s >= nominal::nominal(b).compress_mb_s {
                Spec::Auto { min: a, max: b }
            } else {
                Spec::Auto { min: b, max: a }
            }
        }),
        (1..=QOS_MAX_MB_PER_S).prop_map(|n| Spec::Qos { mb_per_s: n }),
    ]
}

proptest! {
    #[test]
    fn parse_of_display_is_identity(spec in any_spec()) {
        let text = spec.to_string();
        prop_assert_eq!(text.parse::<Spec>().unwrap(), spec);
    }

    #[test]
    fn codec_display_parses_back(codec in any_codec()) {
        prop_assert_eq!(codec.to_string().parse::<Codec>().unwrap(), codec);
    }

    #[test]
    fn arbitrary_text_never_panics(s in ".{0,24}") {
        let _ = s.parse::<Spec>();
        let _ = Spec::parse_list(&s);
    }
}

/// `split_at_checked(1)` is `None` both for an empty rest and for a rest
/// whose first character is not ASCII, so `zstdé` parsed as plain `zstd` (level 3) and a
/// mistyped mount option was taken silently.
#[test]
fn non_ascii_junk_after_zstd_or_lz4hc_is_refused() {
    for input in ["zstd\u{e9}", "zstd\u{2013}3", "lz4hc\u{e9}", "ZSTD\u{fc}", "lz4hc\u{2014}9", "qos\u{e9}5"] {
        let r = input.parse::<Spec>();
        assert!(r.is_err(), "{input:?} parsed as {:?}", r.unwrap());
    }
    assert!(Spec::parse_list("zstd\u{e9},lz4").is_err());
}

#[test]
fn stores_as_names_the_records_a_rewrite_with_the_spec_would_not_change() {
    let z = |l| Codec::zstd(l).unwrap();
    let zstd15: Spec = "zstd:15".parse().unwrap();
    assert!(zstd15.stores_as(z(15)));
    assert!(!zstd15.stores_as(z(14)), "another level is another encoding");
    assert!(!zstd15.stores_as(Codec::lz4(1).unwrap()));
    assert!(!zstd15.stores_as(Codec::NONE), "a raw record is tried, not skipped");
    let none: Spec = "none".parse().unwrap();
    assert!(none.stores_as(Codec::NONE));
    assert!(!none.stores_as(z(1)));
    // auto:MIN..MAX: every codec between the bounds by nominal cost, not raw
    let a: Spec = "auto:1..9".parse().unwrap();
    for l in 1..=9 {
        assert!(a.stores_as(z(l)), "zstd:{l} lies in auto:1..9");
    }
    assert!(!a.stores_as(z(10)));
    assert!(!a.stores_as(z(-5)));
    assert!(!a.stores_as(Codec::NONE));
    let bare: Spec = "auto".parse().unwrap();
    assert!(bare.stores_as(z(15)) && bare.stores_as(Codec::lz4(64).unwrap()));
    assert!(!bare.stores_as(z(19)));
    // a stored level no build accepts is never "the same"
    assert!(!bare.stores_as(Codec { alg: Algorithm::Zstd, level: 0 }));
}
