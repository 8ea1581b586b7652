// size.go parses human sizes such as "16MB" or "4gb" from setup configs.

package client

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseSize accepts a byte count ("1048576") or a number with a unit
// (B, KB, MB, GB, TB, with or without B, any case, binary multiples as
// Mooncake's parser uses).
func ParseSize(s string) (uint64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(t, "ib")
	t = strings.TrimSuffix(t, "b")
	mult := uint64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'k':
			mult = 1 << 10
		case 'm':
			mult = 1 << 20
		case 'g':
			mult = 1 << 30
		case 't':
			mult = 1 << 40
		}
		if mult != 1 {
			t = strings.TrimSpace(t[:n-1])
		}
	}
	if t == "" {
		return 0, fmt.Errorf("size %q has no number", s)
	}
	if v, err := strconv.ParseUint(t, 10, 64); err == nil {
		if mult > 1 && v > (1<<64-1)/mult {
			return 0, fmt.Errorf("size %q overflows", s)
		}
		return v * mult, nil
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || f < 0 || f*float64(mult) >= 1<<64 {
		return 0, fmt.Errorf("size %q is not a byte count", s)
	}
	return uint64(f * float64(mult)), nil
}
