//! JSON text written the way pydantic-core's `to_json` writes it, for the turn's messages
//! (`py/message_json.rs` walks the Python objects and calls these).
//!
//! Byte-identical output is the whole point: a store keeps the text, and a conversation read
//! back from one host must equal what another wrote. So each writer copies one rule of
//! pydantic-core's, and a differential test compares both on generated values:
//! - strings: `"` and `\` escaped, the control characters below U+0020 as `\b \t \n \f \r`
//!   or `\u00xx` (lowercase hex), everything else (DEL, non-ASCII, U+2028) as raw UTF-8;
//! - floats: the shortest digits that round-trip, laid out as ryu lays them out (a decimal
//!   point up to 16 integer digits or 5 leading zeros, an exponent otherwise), with a `+` on
//!   positive exponents (`1e+16`, `1e-7`, `0.00001`, `1.0`, `-0.0`);
//! - datetimes: as `isoformat()` writes them but with a zero offset written `Z`; an offset
//!   with seconds is not taken (`None`): pydantic-core truncates it, and the caller falls back.

use std::fmt::Write as _;

/// Appends `text` as a JSON string, quotes included.
pub fn write_str(out: &mut Vec<u8>, text: &str) {
    out.push(b'"');
    let bytes = text.as_bytes();
    let mut start = 0;
    for (i, &byte) in bytes.iter().enumerate() {
        let short: &[u8] = match byte {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            0x0c => b"\\f",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x00..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        if short.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(byte >> 4)]);
            out.push(HEX[usize::from(byte & 0xf)]);
        } else {
            out.extend_from_slice(short);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Appends a finite float; `false` (nothing written) for NaN and the infinities, which
/// pydantic-core's JSON refuses or writes as `null` depending on its settings.
pub fn write_f64(out: &mut Vec<u8>, value: f64) -> bool {
    if !value.is_finite() {
        return false;
    }
    // `{:e}` gives the shortest round-trip digits: "-1.2345e-7", "0e0".
    let mut sci = String::with_capacity(32);
    write!(sci, "{value:e}").expect("writing to a String cannot fail");
    let (mantissa, exp) = sci
        .split_once('e')
        .expect("`{:e}` always writes an exponent");
    let exp: i32 = exp.parse().expect("`{:e}` writes a decimal exponent");
    let (negative, mantissa) = match mantissa.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, mantissa),
    };
    let digits: Vec<u8> = mantissa.bytes().filter(|&b| b != b'.').collect();
    let length = i32::try_from(digits.len()).expect("an f64 has at most 17 digits");
    let point = exp + 1; // where the decimal point goes, counted from the first digit
    if negative {
        out.push(b'-');
    }
    if length <= point && point <= 16 {
        out.extend_from_slice(&digits);
        out.extend(std::iter::repeat_n(b'0', (point - length) as usize));
        out.extend_from_slice(b".0");
    } else if 0 < point && point <= 16 {
        out.extend_from_slice(&digits[..point as usize]);
        out.push(b'.');
        out.extend_from_slice(&digits[point as usize..]);
    } else if -5 < point && point <= 0 {
        out.extend_from_slice(b"0.");
        out.extend(std::iter::repeat_n(b'0', (-point) as usize));
        out.extend_from_slice(&digits);
    } else {
        out.push(digits[0]);
        if length > 1 {
            out.push(b'.');
            out.extend_from_slice(&digits[1..]);
        }
        out.push(b'e');
        if exp > 0 {
            out.push(b'+');
        }
        out.extend_from_slice(exp.to_string().as_bytes());
    }
    true
}

/// The fields of a Python `datetime`, as its attributes give them.
pub struct DateTime {
    pub year: u32,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    pub microsecond: u32,
    /// `utcoffset()` in seconds (its microseconds must be zero); `None` for a naive one.
    pub offset: Option<i32>,
}

/// pydantic-core's text of a datetime: `YYYY-MM-DDTHH:MM:SS`, `.ffffff` when there are
/// microseconds, then `Z` for a zero offset or `+HH:MM`; `None` for an offset with seconds
/// (pydantic-core truncates those; the caller falls back).
pub fn datetime_text(at: &DateTime) -> Option<String> {
    let mut text = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        at.year, at.month, at.day, at.hour, at.minute, at.second
    );
    if at.microsecond != 0 {
        write!(text, ".{:06}", at.microsecond).expect("writing to a String cannot fail");
    }
    match at.offset {
        None => {}
        Some(0) => text.push('Z'),
        Some(offset) if offset % 60 == 0 => {
            let sign = if offset < 0 { '-' } else { '+' };
            let minutes = offset.unsigned_abs() / 60;
            write!(text, "{sign}{:02}:{:02}", minutes / 60, minutes % 60)
                .expect("writing to a String cannot fail");
        }
        Some(_) => return None,
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn string(text: &str) -> String {
        let mut out = Vec::new();
        write_str(&mut out, text);
        String::from_utf8(out).unwrap()
    }

    fn float(value: f64) -> Option<String> {
        let mut out = Vec::new();
        write_f64(&mut out, value).then(|| String::from_utf8(out).unwrap())
    }

    #[test]
    fn strings_escape_what_pydantic_escapes() {
        assert_eq!(string(""), r#""""#);
        assert_eq!(string("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(
            string("\u{0}\u{1}\u{8}\t\n\u{b}\u{c}\r\u{1f}"),
            r#""\u0000\u0001\b\t\n\u000b\f\r\u001f""#
        );
        // DEL, non-ASCII, the line separator and astral characters go through as UTF-8.
        assert_eq!(
            string("\u{7f}\u{80}\u{2028}é😀"),
            "\"\u{7f}\u{80}\u{2028}é😀\""
        );
    }

    #[test]
    fn floats_use_pydantics_layout() {
        let cases = [
            (1.0, "1.0"),
            (-0.0, "-0.0"),
            (0.0, "0.0"),
            (0.1, "0.1"),
            (1e-5, "0.00001"),
            (1.5e-5, "0.000015"),
            (1e-6, "1e-6"),
            (1e-7, "1e-7"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1e22, "1e+22"),
            (123_456.789, "123456.789"),
            (0.000_123_4, "0.0001234"),
            (9_007_199_254_740_992.0, "9007199254740992.0"),
            (12_345_678_901_234_567.0, "1.2345678901234568e+16"),
            (5e-324, "5e-324"),
            (f64::MAX, "1.7976931348623157e+308"),
            (-2.5e-300, "-2.5e-300"),
        ];
        for (value, text) in cases {
            assert_eq!(float(value).as_deref(), Some(text), "{value:e}");
        }
        assert_eq!(float(f64::NAN), None);
        assert_eq!(float(f64::INFINITY), None);
        assert_eq!(float(f64::NEG_INFINITY), None);
    }

    #[test]
    fn datetimes_write_a_zero_offset_as_z() {
        let at = |microsecond, offset| DateTime {
            year: 2024,
            month: 1,
            day: 2,
            hour: 3,
            minute: 4,
            second: 5,
            microsecond,
            offset,
        };
        let cases = [
            (at(0, None), Some("2024-01-02T03:04:05")),
            (at(123_000, None), Some("2024-01-02T03:04:05.123000")),
            (at(0, Some(0)), Some("2024-01-02T03:04:05Z")),
            (at(7, Some(0)), Some("2024-01-02T03:04:05.000007Z")),
            (at(0, Some(-19_800)), Some("2024-01-02T03:04:05-05:30")),
            (at(0, Some(86_340)), Some("2024-01-02T03:04:05+23:59")),
            (at(0, Some(17)), None),
            (at(0, Some(-3601)), None),
        ];
        for (value, text) in cases {
            assert_eq!(datetime_text(&value).as_deref(), text, "{text:?}");
        }
        let first = DateTime {
            year: 1,
            month: 1,
            day: 1,
            hour: 0,
            minute: 0,
            second: 0,
            microsecond: 0,
            offset: None,
        };
        assert_eq!(
            datetime_text(&first).as_deref(),
            Some("0001-01-01T00:00:00")
        );
    }
}
