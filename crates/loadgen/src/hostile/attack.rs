//! The attacks by name, and what each needs to know about the server.

/// One kind of attack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Attack {
    /// Request lines that are not HTTP/1.1.
    MalformedRequestLine,
    /// Bytes that are not HTTP at all (random, NUL, TLS hello, HTTP/2 preface).
    GarbageBytes,
    /// A request head over 64 KiB.
    OversizedHead,
    /// A request head trickled slower than the server's header timeout.
    Slowloris,
    /// A `Last-Event-ID` of megabytes.
    HugeLastEventId,
    /// About 8 KB of crafted resume list.
    CraftedLastEventId,
    /// SSE topic names holding control characters.
    TopicControlChars,
    /// SSE topic names with unicode look-alikes, invisible characters, invalid UTF-8.
    TopicUnicode,
    /// SSE topic names and paths with `../` segments.
    TopicPathTraversal,
    /// SSE requests naming too many topics.
    TooManyTopics,
    /// WebSocket upgrade from a forbidden browser origin (`--origin-forbidden`).
    WsBadOrigin,
    /// WebSocket upgrade with a missing or malformed `Sec-WebSocket-Key`.
    WsBadKey,
    /// WebSocket upgrade with a version other than 13.
    WsBadVersion,
    /// A text frame that is not UTF-8.
    WsInvalidUtf8,
    /// A text frame that is not JSON.
    WsInvalidJson,
    /// A JSON frame of an unknown or malformed type.
    WsUnknownType,
    /// A binary frame.
    WsBinaryFrame,
    /// Fragmented messages, valid and invalid.
    WsFragmented,
    /// A message over the server's maximum size.
    WsOversizedFrame,
    /// Thousands of pings, then an application ping that must still be answered.
    WsPingFlood,
    /// A subscribe (and an unsubscribe) naming 10,000 topics.
    WsSubscribe10k,
    /// An expired token.
    JwtExpired,
    /// A token with a forged signature.
    JwtForged,
    /// An `alg: none` token.
    JwtAlgNone,
    /// Garbage where a token should be.
    JwtGarbage,
    /// Opt-in: valid SSE subscriptions to 64 never-seen topics each (topics are server state).
    TopicSpray,
    /// Whole histories of large messages asked for, and read slowly (memory amplification).
    HistoryAmplification,
    /// Compressed 64 KiB pings over permessage-deflate (CPU amplification).
    WsDeflatePing,
    /// A MessagePack ping holding 60,000 nils (CPU amplification).
    WsMsgpackNils,
    /// Cross-site and DNS-rebinding requests to the admin listener (`--admin-url`).
    AdminCrossSite,
    /// A cross-site WebSocket upgrade carrying a cookie, to a hooked server (`--hooked`).
    WsCookieCrossSite,
    /// Topics of a namespace whose subscribe hook is unavailable under
    /// `on_unavailable = "allow"` (`--hooked`).
    HookUnavailableAllow,
    /// Many new wildcard patterns from many addresses (the pattern capacity as a lock-out).
    PatternLockout,
    /// A wildcard over a namespace whose subscribe hook denies one of its topics (`--hooked`).
    PatternPastHook,
    /// `limit` that is not a small positive number, on the history and topics API.
    BadLimit,
    /// A path segment that is not percent-encoded UTF-8 (`/v1/topics/%FF/history`), on both
    /// listeners.
    BadPath,
    /// Publishes with a sampled `traceparent` and the largest `tracestate`s a head holds (many
    /// members, long members, repeated headers), to the admin listener's publish API
    /// (`--admin-url`): kept and exported only within 32 members and 512 characters.
    TraceState,
    /// Publishes with an oversized `traceparent` (a later version's extra fields, a malformed
    /// one), to the admin listener's publish API (`--admin-url`).
    TraceParent,
    /// One HTTP/2 connection opening as many streams as the server allows, each owed a large
    /// answer, read no further than the first flow-control window (`--h2-url`).
    H2Streams,
    /// HTTP/2 streams opened and cancelled at once (RST_STREAM), 200 in a row, then an honest
    /// request on the same connection (`--h2-url`).
    H2RapidReset,
    /// An HTTP/2 request whose header list is far over the server's limit (`--h2-url`).
    H2HeaderList,
    /// Thousands of HTTP/2 SETTINGS or PING frames, each owed an acknowledgement, then an
    /// honest request on the same connection (`--h2-url`).
    H2ControlFlood,
}

impl Attack {
    /// Every attack, in catalogue order.
    pub(crate) const ALL: [Attack; 42] = [
        Attack::MalformedRequestLine,
        Attack::GarbageBytes,
        Attack::OversizedHead,
        Attack::Slowloris,
        Attack::HugeLastEventId,
        Attack::CraftedLastEventId,
        Attack::TopicControlChars,
        Attack::TopicUnicode,
        Attack::TopicPathTraversal,
        Attack::TooManyTopics,
        Attack::WsBadOrigin,
        Attack::WsBadKey,
        Attack::WsBadVersion,
        Attack::WsInvalidUtf8,
        Attack::WsInvalidJson,
        Attack::WsUnknownType,
        Attack::WsBinaryFrame,
        Attack::WsFragmented,
        Attack::WsOversizedFrame,
        Attack::WsPingFlood,
        Attack::WsSubscribe10k,
        Attack::JwtExpired,
        Attack::JwtForged,
        Attack::JwtAlgNone,
        Attack::JwtGarbage,
        Attack::TopicSpray,
        Attack::HistoryAmplification,
        Attack::WsDeflatePing,
        Attack::WsMsgpackNils,
        Attack::AdminCrossSite,
        Attack::WsCookieCrossSite,
        Attack::HookUnavailableAllow,
        Attack::PatternLockout,
        Attack::PatternPastHook,
        Attack::BadLimit,
        Attack::BadPath,
        Attack::TraceState,
        Attack::TraceParent,
        Attack::H2Streams,
        Attack::H2RapidReset,
        Attack::H2HeaderList,
        Attack::H2ControlFlood,
    ];

    /// Stable snake_case name (reports, `--attacks`).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Attack::MalformedRequestLine => "malformed_request_line",
            Attack::GarbageBytes => "garbage_bytes",
            Attack::OversizedHead => "oversized_head",
            Attack::Slowloris => "slowloris",
            Attack::HugeLastEventId => "huge_last_event_id",
            Attack::CraftedLastEventId => "crafted_last_event_id",
            Attack::TopicControlChars => "topic_control_chars",
            Attack::TopicUnicode => "topic_unicode",
            Attack::TopicPathTraversal => "topic_path_traversal",
            Attack::TooManyTopics => "too_many_topics",
            Attack::WsBadOrigin => "ws_bad_origin",
            Attack::WsBadKey => "ws_bad_key",
            Attack::WsBadVersion => "ws_bad_version",
            Attack::WsInvalidUtf8 => "ws_invalid_utf8",
            Attack::WsInvalidJson => "ws_invalid_json",
            Attack::WsUnknownType => "ws_unknown_type",
            Attack::WsBinaryFrame => "ws_binary_frame",
            Attack::WsFragmented => "ws_fragmented",
            Attack::WsOversizedFrame => "ws_oversized_frame",
            Attack::WsPingFlood => "ws_ping_flood",
            Attack::WsSubscribe10k => "ws_subscribe_10k",
            Attack::JwtExpired => "jwt_expired",
            Attack::JwtForged => "jwt_forged",
            Attack::JwtAlgNone => "jwt_alg_none",
            Attack::JwtGarbage => "jwt_garbage",
            Attack::TopicSpray => "topic_spray",
            Attack::HistoryAmplification => "history_amplification",
            Attack::WsDeflatePing => "ws_deflate_ping",
            Attack::WsMsgpackNils => "ws_msgpack_nils",
            Attack::AdminCrossSite => "admin_cross_site",
            Attack::WsCookieCrossSite => "ws_cookie_cross_site",
            Attack::HookUnavailableAllow => "hook_unavailable_allow",
            Attack::PatternLockout => "pattern_lockout",
            Attack::PatternPastHook => "pattern_past_hook",
            Attack::BadLimit => "bad_limit",
            Attack::BadPath => "bad_path",
            Attack::TraceState => "trace_state",
            Attack::TraceParent => "trace_parent",
            Attack::H2Streams => "h2_streams",
            Attack::H2RapidReset => "h2_rapid_reset",
            Attack::H2HeaderList => "h2_header_list",
            Attack::H2ControlFlood => "h2_control_flood",
        }
    }

    /// The attack called `name`.
    pub(crate) fn from_name(name: &str) -> Option<Attack> {
        Self::ALL.iter().copied().find(|a| a.name() == name)
    }

    /// Holds its connection for seconds (run by a bounded number of loops at once).
    pub(crate) fn is_slow(self) -> bool {
        matches!(self, Attack::Slowloris)
    }

    /// Part of the default catalogue (where its [`Gate`] is open).
    pub(crate) fn is_default(self) -> bool {
        !matches!(self, Attack::TopicSpray)
    }

    /// What the attack needs to know about the server to make sense.
    pub(crate) fn gate(self) -> Option<Gate> {
        match self {
            Attack::WsBadOrigin => Some(Gate::OriginForbidden),
            Attack::AdminCrossSite | Attack::TraceState | Attack::TraceParent => {
                Some(Gate::AdminUrl)
            }
            Attack::H2Streams
            | Attack::H2RapidReset
            | Attack::H2HeaderList
            | Attack::H2ControlFlood => Some(Gate::H2),
            Attack::WsCookieCrossSite | Attack::HookUnavailableAllow | Attack::PatternPastHook => {
                Some(Gate::Hooked)
            }
            _ => None,
        }
    }
}

/// A fact about the server that some attacks need, given by a flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gate {
    /// `--origin-forbidden`: an origin the server refuses.
    OriginForbidden,
    /// `--admin-url`: the admin listener's address.
    AdminUrl,
    /// `--hooked`: the server runs the soak's hooks (connect; subscribe for `rooms:`, denying
    /// `rooms:secret`; an unavailable one for `secret:` under `on_unavailable = "allow"`).
    Hooked,
    /// `--h2-url`: the server's public listener over TLS, where it serves HTTP/2 (ALPN `h2`).
    H2,
}

impl Gate {
    /// The flag that opens it.
    pub(crate) fn flag(self) -> &'static str {
        match self {
            Gate::OriginForbidden => "--origin-forbidden",
            Gate::AdminUrl => "--admin-url",
            Gate::Hooked => "--hooked",
            Gate::H2 => "--h2-url",
        }
    }
}

/// Which gates a run has open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Gates {
    /// `--origin-forbidden` given.
    pub origin_forbidden: bool,
    /// `--admin-url` given.
    pub admin_url: bool,
    /// `--hooked` given.
    pub hooked: bool,
    /// `--h2-url` given.
    pub h2: bool,
}

impl Gates {
    /// Whether `attack` can run.
    pub(crate) fn open(self, attack: Attack) -> bool {
        match attack.gate() {
            None => true,
            Some(Gate::OriginForbidden) => self.origin_forbidden,
            Some(Gate::AdminUrl) => self.admin_url,
            Some(Gate::Hooked) => self.hooked,
            Some(Gate::H2) => self.h2,
        }
    }
}
