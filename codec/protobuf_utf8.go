package codec

import "encoding/binary"

// validUTF8 reports whether s is valid UTF-8, as utf8.ValidString does
// (FuzzValidUTF8 checks that), in half its instructions on text of
// three-byte characters, which is most of CJK: such a run is checked
// four bytes at a time, and ASCII eight at a time. The protobuf plans
// check every string with it, as the library checks proto3 strings.
func validUTF8(s string) bool {
	i, n := 0, len(s)
	for i < n {
		c := s[i]
		if c < 0x80 {
			i++
			for i+8 <= n && binary.LittleEndian.Uint64([]byte(s[i:i+8]))&0x8080808080808080 == 0 {
				i += 8
			}
			continue
		}
		// Runs of three-byte characters (most of CJK) four bytes at a
		// time: a lead byte E1..EC or EE..EF and two continuation bytes.
		for i+4 <= n {
			w := binary.LittleEndian.Uint32([]byte(s[i : i+4]))
			if w&0xC0C0F0 != 0x8080E0 || byte(w) == 0xE0 || byte(w) == 0xED {
				break
			}
			i += 3
		}
		if i >= n {
			break
		}
		c = s[i]
		if c < 0x80 {
			continue
		}
		switch {
		case c >= 0xE1 && c <= 0xEF && c != 0xED: // the commonest: 3 bytes, second byte in 80..BF
			if i+2 >= n || s[i+1]&0xC0 != 0x80 || s[i+2]&0xC0 != 0x80 {
				return false
			}
			i += 3
		case c >= 0xC2 && c <= 0xDF:
			if i+1 >= n || s[i+1]&0xC0 != 0x80 {
				return false
			}
			i += 2
		case c == 0xE0:
			if i+2 >= n || s[i+1] < 0xA0 || s[i+1] > 0xBF || s[i+2]&0xC0 != 0x80 {
				return false
			}
			i += 3
		case c == 0xED:
			if i+2 >= n || s[i+1] < 0x80 || s[i+1] > 0x9F || s[i+2]&0xC0 != 0x80 {
				return false
			}
			i += 3
		case c == 0xF0:
			if i+3 >= n || s[i+1] < 0x90 || s[i+1] > 0xBF || s[i+2]&0xC0 != 0x80 || s[i+3]&0xC0 != 0x80 {
				return false
			}
			i += 4
		case c >= 0xF1 && c <= 0xF3:
			if i+3 >= n || s[i+1]&0xC0 != 0x80 || s[i+2]&0xC0 != 0x80 || s[i+3]&0xC0 != 0x80 {
				return false
			}
			i += 4
		case c == 0xF4:
			if i+3 >= n || s[i+1] < 0x80 || s[i+1] > 0x8F || s[i+2]&0xC0 != 0x80 || s[i+3]&0xC0 != 0x80 {
				return false
			}
			i += 4
		default:
			return false
		}
	}
	return true
}
