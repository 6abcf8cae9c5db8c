//! Which partition of a Kafka topic holds a Herald topic's records, and the log's partitions
//! that makes (the partitions of every configured Kafka topic, numbered once: [`Layout`]).
//!
//! Records are keyed by their Herald topic (Herald's producer does; other producers must),
//! so the producer's partitioner puts each Herald topic in one partition. A node computes the
//! same partition from the topic's name to know which partition to read for a subscription:
//! `cluster.kafka_partitioner` names the producers' partitioner, `consistent` (librdkafka's
//! default: CRC-32 of the key) or `murmur2` (the Java producer's default, Kafka's
//! `Utils.murmur2` with seed `0x9747b28c`, made positive). Both are the well-known formulas,
//! checked here against librdkafka's and Java's test vectors.

use crate::config::KafkaPartitioner;

/// Kafka's murmur2 (`org.apache.kafka.common.utils.Utils.murmur2`, librdkafka's
/// `rd_murmur2`): the 32-bit MurmurHash2 of `data` with seed `0x9747b28c`.
pub(crate) fn murmur2(data: &[u8]) -> u32 {
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h: u32 = 0x9747_b28c ^ data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        for (i, b) in rest.iter().enumerate().rev() {
            h ^= u32::from(*b) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h
}

/// CRC-32 (IEEE, reflected; zlib's and librdkafka's `rd_crc32`) of `data`.
pub(crate) fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// The partition (of `partitions`) that `partitioner` gives a record keyed `key`.
pub(crate) fn partition_of(partitioner: KafkaPartitioner, key: &[u8], partitions: u32) -> u32 {
    let partitions = partitions.max(1);
    match partitioner {
        KafkaPartitioner::Consistent => crc32(key) % partitions,
        KafkaPartitioner::Murmur2 => (murmur2(key) & 0x7fff_ffff) % partitions,
    }
}

/// The librdkafka `partitioner` property that makes Herald's producer place records as
/// `partitioner` says (the `_random` forms differ only for empty keys, which Herald never
/// produces).
pub(crate) fn producer_property(partitioner: KafkaPartitioner) -> &'static str {
    match partitioner {
        KafkaPartitioner::Consistent => "consistent_random",
        KafkaPartitioner::Murmur2 => "murmur2_random",
    }
}

/// The configured Kafka topics with their partition counts, as the first metadata a node read
/// gave them: partition number `base + p` is partition `p` of the topic at `base`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    partitioner: KafkaPartitioner,
    /// Each Kafka topic, its partitions and its first partition's number.
    topics: Vec<(String, u32, u32)>,
    total: u32,
}

impl Layout {
    /// The partitions of `topics` (name, partition count), numbered in order.
    pub(crate) fn new(partitioner: KafkaPartitioner, topics: &[(String, u32)]) -> Self {
        let mut base = 0;
        let topics = (topics.iter())
            .map(|(name, partitions)| {
                let t = (name.clone(), *partitions, base);
                base += partitions;
                t
            })
            .collect();
        Self {
            partitioner,
            topics,
            total: base,
        }
    }

    /// How many partitions (of every configured topic) there are.
    pub(crate) fn total(&self) -> u32 {
        self.total
    }

    /// The partition counts, in the configured topics' order.
    pub(crate) fn counts(&self) -> Vec<(String, u32)> {
        (self.topics.iter())
            .map(|(name, partitions, _)| (name.clone(), *partitions))
            .collect()
    }

    /// The numbers of the partitions that can hold `herald_topic`: its partition in each
    /// configured Kafka topic (any of them may carry it).
    pub(crate) fn partitions_of<'a>(
        &'a self,
        herald_topic: &'a str,
    ) -> impl Iterator<Item = u32> + 'a {
        (self.topics.iter()).map(move |(_, partitions, base)| {
            base + partition_of(self.partitioner, herald_topic.as_bytes(), *partitions)
        })
    }

    /// The number of partition `partition` of Kafka topic `topic`, when the layout has it.
    pub(crate) fn number(&self, topic: &str, partition: i32) -> Option<u32> {
        let (_, partitions, base) = self.topics.iter().find(|(t, ..)| t == topic)?;
        let p = u32::try_from(partition).ok().filter(|p| p < partitions)?;
        Some(base + p)
    }

    /// The Kafka topic and partition numbered `number`.
    pub(crate) fn partition(&self, number: u32) -> (&str, i32) {
        let (name, _, base) = (self.topics.iter())
            .rfind(|(_, _, base)| *base <= number)
            .expect("a partition of the layout");
        (name, (number - base) as i32)
    }

    /// Whether a record of `herald_topic` read from partition `partition` of a topic with
    /// `partitions` partitions is where its key puts it.
    pub(crate) fn is_routed(&self, herald_topic: &str, partition: i32, partitions: u32) -> bool {
        partition_of(self.partitioner, herald_topic.as_bytes(), partitions) as i64
            == i64::from(partition)
    }

    /// The partition count of Kafka topic `topic`.
    pub(crate) fn partitions(&self, topic: &str) -> Option<u32> {
        (self.topics.iter())
            .find(|(t, ..)| t == topic)
            .map(|(_, partitions, _)| *partitions)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_is_kafka_s() {
        // librdkafka's rdmurmur2.c test vectors, computed with Java's Utils.murmur2.
        let unaligned = "PreAmbleWillBeRemoved,ThePrePartThatIs";
        let cases: [(&str, u32); 11] = [
            ("kafka", 0xd067cf64),
            ("giberish123456789", 0x8f552b0c),
            ("1234", 0x9fc97b14),
            ("234", 0xe7c009ca),
            ("34", 0x873930da),
            ("4", 0x5a4b5ca1),
            (unaligned, 0x78424f1c),
            (&unaligned[1..], 0x4a62b377),
            (&unaligned[2..], 0xe0e4e09e),
            (&unaligned[3..], 0x62b8b43f),
            ("", 0x106e08d9),
        ];
        for (key, hash) in cases {
            assert_eq!(murmur2(key.as_bytes()), hash, "{key:?}");
        }
        // The Java producer's partition of key "kafka" among 6: (h & 0x7fffffff) % 6.
        assert_eq!(
            partition_of(KafkaPartitioner::Murmur2, b"kafka", 6),
            (0xd067cf64u32 & 0x7fff_ffff) % 6
        );
    }

    #[test]
    fn crc32_is_librdkafka_s() {
        assert_eq!(crc32(b"123456789"), 0xcbf43926);
        assert_eq!(crc32(b""), 0);
        assert_eq!(
            crc32(b"The quick brown fox jumps over the lazy dog"),
            0x414fa339
        );
        assert_eq!(
            partition_of(KafkaPartitioner::Consistent, b"123456789", 7),
            0xcbf43926 % 7
        );
    }

    #[test]
    fn a_herald_topic_has_one_partition_per_configured_kafka_topic() {
        let layout = Layout::new(
            KafkaPartitioner::Consistent,
            &[("a".into(), 3), ("b".into(), 4)],
        );
        assert_eq!(layout.total(), 7);
        let partitions: Vec<u32> = layout.partitions_of("orders").collect();
        assert_eq!(partitions.len(), 2);
        assert_eq!(partitions[0], crc32(b"orders") % 3);
        assert_eq!(partitions[1], 3 + crc32(b"orders") % 4);
        assert_eq!(layout.number("b", 2), Some(5));
        assert_eq!(layout.number("b", 4), None);
        assert_eq!(layout.number("c", 0), None);
        assert_eq!(layout.partition(5), ("b", 2));
        assert_eq!(layout.partition(0), ("a", 0));
        assert_eq!(layout.partition(2), ("a", 2));
        let p = crc32(b"orders") % 3;
        assert!(layout.is_routed("orders", p as i32, 3));
        assert!(!layout.is_routed("orders", ((p + 1) % 3) as i32, 3));
    }
}
