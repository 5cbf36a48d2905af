package redisx

import (
	"strconv"
	"strings"
)

// Slots is the number of hash slots of a Redis Cluster.
const Slots = 16384

// Slot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of its hash tag (the
// part between the first "{" and the next "}", when not empty) or of the whole key, mod
// 16384.
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % Slots
}

// SpreadTag returns the hash tag of part i of n parts of one structure: "<base>:<i>:<j>"
// with the smallest j whose slot lies in the i-th of n equal ranges of the slot space.
// A cluster's masters own contiguous slot ranges, so parts tagged this way fall on the
// masters in proportion to the slots each owns — evenly, when the slots are — where tags
// hashed at random would pile up on some masters. n must be at most Slots.
func SpreadTag(base string, i, n int) string {
	return tagIn(base+":"+strconv.Itoa(i)+":", i*Slots/n, (i+1)*Slots/n)
}

// CentredTag is SpreadTag kept off its range's edges: the tag's slot lies in the middle
// half of the i-th of n equal ranges. A cluster's slot split is equal only up to rounding
// (redis-cli gives three masters 0-5460, 5461-10922, 10923-16383, where twelve equal
// ranges would cut at 5461.3 and 10922.7), so a part whose slot sat at its range's edge
// could fall on the neighbouring master; a quarter range's margin holds for any split
// within a quarter range of equal. n must be at most Slots.
func CentredTag(base string, i, n int) string {
	lo, hi := i*Slots/n, (i+1)*Slots/n
	w := (hi - lo) / 4
	return tagIn(base+":"+strconv.Itoa(i)+":", lo+w, hi-w)
}

// tagIn is prefix followed by the smallest j ≥ 0 whose slot lies in [lo, hi).
func tagIn(prefix string, lo, hi int) string {
	for j := 0; ; j++ {
		tag := prefix + strconv.Itoa(j)
		if s := Slot(tag); s >= lo && s < hi {
			return tag
		}
	}
}
