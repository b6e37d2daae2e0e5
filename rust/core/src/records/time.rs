//! Timestamps as flow exporters write them.

/// Days from 1970-01-01 to the civil date (proleptic Gregorian; H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn digits(b: &[u8]) -> Option<u32> {
    if b.is_empty() || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(b.iter().fold(0u32, |n, &c| n * 10 + (c - b'0') as u32))
}

/// An RFC 3339 time (`2024-05-01T12:00:00.123456789Z`, `...+02:00`; a space for the `T`) as
/// nanoseconds since the Unix epoch; None when it is not one or is before 1970.
pub fn rfc3339_ns(text: &str) -> Option<u64> {
    let b = text.trim().as_bytes();
    if b.len() < 19
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let (y, mo, d) = (digits(&b[0..4])?, digits(&b[5..7])?, digits(&b[8..10])?);
    let (h, mi, s) = (digits(&b[11..13])?, digits(&b[14..16])?, digits(&b[17..19])?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let mut i = 19;
    let mut frac: u64 = 0;
    if i < b.len() && b[i] == b'.' {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            if i - start < 9 {
                frac = frac * 10 + (b[i] - b'0') as u64;
            }
            i += 1;
        }
        let n = i - start;
        if n == 0 {
            return None;
        }
        for _ in n..9 {
            frac *= 10;
        }
    }
    let offset_s: i64 = match b.get(i) {
        Some(b'Z' | b'z') if i + 1 == b.len() => 0,
        Some(&sign @ (b'+' | b'-')) if b.len() == i + 6 && b[i + 3] == b':' => {
            let v = (digits(&b[i + 1..i + 3])? * 3600 + digits(&b[i + 4..i + 6])? * 60) as i64;
            if sign == b'+' {
                v
            } else {
                -v
            }
        }
        None => 0,
        _ => return None,
    };
    let secs = days_from_civil(y as i64, mo, d) * 86_400 + (h * 3600 + mi * 60 + s) as i64 - offset_s;
    if secs < 0 {
        return None;
    }
    Some(secs as u64 * 1_000_000_000 + frac)
}

/// Seconds (integer or with a fraction, as conntrack's `[1700000000.123456]`) as nanoseconds.
pub fn seconds_ns(text: &str) -> Option<u64> {
    let t = text.trim();
    let (whole, frac) = t.split_once('.').unwrap_or((t, ""));
    let w: u64 = whole.parse().ok()?;
    let mut f: u64 = 0;
    for (k, c) in frac.bytes().enumerate() {
        if !c.is_ascii_digit() {
            return None;
        }
        if k < 9 {
            f = f * 10 + (c - b'0') as u64;
        }
    }
    for _ in frac.len().min(9)..9 {
        f *= 10;
    }
    w.checked_mul(1_000_000_000)?.checked_add(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339() {
        assert_eq!(rfc3339_ns("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(rfc3339_ns("2024-02-29T12:34:56.5Z"), Some(1_709_210_096_500_000_000));
        assert_eq!(rfc3339_ns("2024-02-29T14:34:56.5+02:00"), Some(1_709_210_096_500_000_000));
        assert_eq!(rfc3339_ns("2024-02-29T12:34:56.123456789123Z"), Some(1_709_210_096_123_456_789));
        assert_eq!(rfc3339_ns("2024-13-01T00:00:00Z"), None);
        assert_eq!(rfc3339_ns("yesterday"), None);
    }

    #[test]
    fn seconds() {
        assert_eq!(seconds_ns("1700000000.5"), Some(1_700_000_000_500_000_000));
        assert_eq!(seconds_ns("12"), Some(12_000_000_000));
        assert_eq!(seconds_ns("x"), None);
    }
}
