//! Hostile JSON Web Tokens: expired, forged, `alg: none` and garbage.
//!
//! HS256 needs HMAC-SHA-256; both are implemented here (FIPS 180-4, RFC 2104) rather than
//! pulling a crypto crate into the load generator for a few tokens per second. Nothing here
//! protects anything: the tokens are meant to be refused.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

const K: [u32; 64] = [
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
];

/// SHA-256 of `data`.
pub(crate) fn sha256(data: &[u8]) -> [u8; 32] {
    let mut h: [u32; 8] = [
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
        0x5be0cd19,
    ];
    let mut msg = data.to_vec();
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&((data.len() as u64).wrapping_mul(8)).to_be_bytes());
    for block in msg.chunks_exact(64) {
        let mut w = [0u32; 64];
        for (i, word) in block.chunks_exact(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16]
                .wrapping_add(s0)
                .wrapping_add(w[i - 7])
                .wrapping_add(s1);
        }
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut hh] = h;
        for i in 0..64 {
            let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
            let ch = (e & f) ^ (!e & g);
            let t1 = hh
                .wrapping_add(s1)
                .wrapping_add(ch)
                .wrapping_add(K[i])
                .wrapping_add(w[i]);
            let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
            let maj = (a & b) ^ (a & c) ^ (b & c);
            let t2 = s0.wrapping_add(maj);
            hh = g;
            g = f;
            f = e;
            e = d.wrapping_add(t1);
            d = c;
            c = b;
            b = a;
            a = t1.wrapping_add(t2);
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e, f, g, hh]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 32];
    for (i, x) in h.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&x.to_be_bytes());
    }
    out
}

/// HMAC-SHA-256 of `msg` under `key`.
pub(crate) fn hmac_sha256(key: &[u8], msg: &[u8]) -> [u8; 32] {
    let mut k = [0u8; 64];
    if key.len() > 64 {
        k[..32].copy_from_slice(&sha256(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let mut inner: Vec<u8> = k.iter().map(|b| b ^ 0x36).collect();
    inner.extend_from_slice(msg);
    let mut outer: Vec<u8> = k.iter().map(|b| b ^ 0x5c).collect();
    outer.extend_from_slice(&sha256(&inner));
    sha256(&outer)
}

fn b64(data: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(data)
}

fn claims(exp: u64) -> String {
    format!(r#"{{"sub":"attacker","exp":{exp},"topics":["*"],"publish":["*"]}}"#)
}

/// An HS256 token with `claims_json`, signed with `secret`.
pub(crate) fn hs256(secret: &[u8], claims_json: &str) -> String {
    let head = b64(br#"{"alg":"HS256","typ":"JWT"}"#);
    let body = b64(claims_json.as_bytes());
    let signing = format!("{head}.{body}");
    let sig = b64(&hmac_sha256(secret, signing.as_bytes()));
    format!("{signing}.{sig}")
}

/// A well-formed HS256 token that expired an hour before `now` (unix seconds). Signed with the
/// server's secret when it is known, so that only the expiry is wrong.
pub(crate) fn expired(secret: &[u8], now: u64) -> String {
    hs256(secret, &claims(now.saturating_sub(3600)))
}

/// A token valid for an hour whose signature is made with the wrong secret.
pub(crate) fn forged(secret: &[u8], now: u64) -> String {
    let mut wrong = secret.to_vec();
    wrong.extend_from_slice(b"-forged");
    hs256(&wrong, &claims(now + 3600))
}

/// `alg: none` tokens, the classic signature bypass: variant `v` picks the spelling.
pub(crate) fn alg_none(now: u64, v: u64) -> String {
    let alg = ["none", "None", "NONE", "nOnE"][(v % 4) as usize];
    let head = b64(format!(r#"{{"alg":"{alg}","typ":"JWT"}}"#).as_bytes());
    let body = b64(claims(now + 3600).as_bytes());
    if v % 8 < 4 {
        format!("{head}.{body}.")
    } else {
        // a signature is present but must be ignored for alg none: still refused
        format!("{head}.{body}.{}", b64(b"not-a-signature"))
    }
}

/// Garbage in the shape of a token (or not): variant `v` picks one.
pub(crate) fn garbage(v: u64, noise: u64) -> String {
    match v % 7 {
        0 => "garbage".into(),
        1 => "a.b.c".into(),
        2 => "..".into(),
        3 => "eyJhbGciOiJIUzI1NiJ9.%%%%.!!!!".into(),
        4 => format!("{}.{}.{}", b64(b"{{{{"), b64(b"[]"), b64(b"x")),
        5 => "A".repeat(4096),
        _ => b64(&noise.to_le_bytes().repeat(48)).replace('A', "."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn sha256_known_vectors() {
        assert_eq!(
            hex(&sha256(b"")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            hex(&sha256(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        // two blocks
        assert_eq!(
            hex(&sha256(
                b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"
            )),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        );
    }

    #[test]
    fn hmac_known_vector() {
        // RFC 4231 test case 2
        assert_eq!(
            hex(&hmac_sha256(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        // a key longer than the block is hashed first (RFC 4231 test case 6)
        assert_eq!(
            hex(&hmac_sha256(
                &[0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First"
            )),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn tokens_have_the_expected_shape() {
        let t = expired(b"secret", 10_000);
        assert_eq!(t.split('.').count(), 3);
        let body = URL_SAFE_NO_PAD
            .decode(t.split('.').nth(1).unwrap())
            .unwrap();
        assert!(String::from_utf8(body).unwrap().contains("\"exp\":6400"));
        assert_ne!(forged(b"secret", 1), hs256(b"secret", &claims(3601)));
        assert!(alg_none(1, 0).ends_with('.'));
        let head = URL_SAFE_NO_PAD
            .decode(alg_none(1, 1).split('.').next().unwrap())
            .unwrap();
        assert_eq!(head, br#"{"alg":"None","typ":"JWT"}"#);
        for v in 0..7 {
            assert!(!garbage(v, 42).is_empty());
        }
    }
}
