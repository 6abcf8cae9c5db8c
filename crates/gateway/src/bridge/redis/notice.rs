//! The append script and the live notice it publishes ([`Notice`]), which the reader reads.

/// The append, in one script so that it is atomic: makes the shard's epoch if it is missing;
/// with an idempotency key (`KEYS[3]`) seen within the window, returns the entry it appended
/// then and only rewrites the key as it is (a write, so that `WAIT` after it confirms the
/// first append on the replicas too); else appends the entry (`XADD`, trimmed), remembers it under
/// the idempotency key, and publishes it on the shard's channel (`PUBLISH`, or `SPUBLISH` on
/// a Redis Cluster: the channel shares the stream's hash tag) with the id of the entry before
/// it, so that a node that missed a notification knows, and reads the gap from the stream.
/// Returns `{epoch, id, 1 if it was a retry}`.
///
/// The message published is a list of netstrings (`<length>:<bytes>`): the epoch, the
/// previous entry's id (`0-0` for the first), the entry's id, then the entry's fields and
/// values as in the stream.
pub(super) static APPEND: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(
        r"
local epoch = redis.call('GET', KEYS[2])
if not epoch then
  redis.call('SET', KEYS[2], ARGV[5])
  epoch = ARGV[5]
end
if KEYS[3] then
  local first = redis.call('GET', KEYS[3])
  if first then
    redis.call('SET', KEYS[3], first, 'KEEPTTL')
    return {epoch, first, 1}
  end
end
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local prev = '0-0'
if last[1] then prev = last[1][1] end
local fields = {}
for i = 7, #ARGV do fields[#fields + 1] = ARGV[i] end
local id = redis.call('XADD', KEYS[1], ARGV[3], '~', ARGV[4], '*', unpack(fields))
if KEYS[3] then redis.call('SET', KEYS[3], id, 'PX', ARGV[6]) end
local parts = {#epoch .. ':' .. epoch, #prev .. ':' .. prev, #id .. ':' .. id}
for i = 7, #ARGV do parts[#parts + 1] = #ARGV[i] .. ':' .. ARGV[i] end
redis.call(ARGV[2], ARGV[1], table.concat(parts))
return {epoch, id, 0}
",
    )
});

/// A notification of the live path, as [`APPEND`] publishes it.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Notice<'a> {
    /// The shard's epoch.
    pub(super) epoch: &'a str,
    /// The id of the entry before this one in the stream (`0-0` when none).
    pub(super) prev: &'a str,
    /// The entry's id.
    pub(super) id: &'a str,
    /// The entry's fields and values, in order.
    pub(super) fields: Vec<(&'a [u8], &'a [u8])>,
}

impl<'a> Notice<'a> {
    /// Parses a notification; `None` when it is not one [`APPEND`] wrote.
    pub(super) fn parse(mut bytes: &'a [u8]) -> Option<Self> {
        let mut next = || -> Option<&'a [u8]> {
            let colon = bytes.iter().take(12).position(|&b| b == b':')?;
            let len: usize = std::str::from_utf8(&bytes[..colon]).ok()?.parse().ok()?;
            let rest = &bytes[colon + 1..];
            let (item, tail) = (rest.get(..len)?, &rest[len..]);
            bytes = tail;
            Some(item)
        };
        let text = |b: &'a [u8]| std::str::from_utf8(b).ok();
        let epoch = text(next()?)?;
        let prev = text(next()?)?;
        let id = text(next()?)?;
        let mut fields = Vec::new();
        while let Some(name) = next() {
            fields.push((name, next()?));
        }
        Some(Self {
            epoch,
            prev,
            id,
            fields,
        })
    }
}

/// An epoch as kept in Redis (hex).
pub(super) fn parse_epoch(epoch: &str) -> u64 {
    u64::from_str_radix(epoch, 16).unwrap_or(1)
}
