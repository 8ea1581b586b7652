// values.go reads flag values the way Mooncake's master (gflags) reads them:
// booleans, integers, doubles and durations.

package server

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// parseBool accepts what gflags accepts: true/false, yes/no, 1/0 and their
// first letters, in any case.
func parseBool(s string) (bool, error) {
	switch strings.ToLower(s) {
	case "true", "t", "yes", "y", "1":
		return true, nil
	case "false", "f", "no", "n", "0":
		return false, nil
	}
	return false, fmt.Errorf("%q is not a boolean (true/false, yes/no, 1/0)", s)
}

// parseInt reads a signed integer of bits bits as gflags does: decimal (a
// leading 0 does not mean octal) or hexadecimal with 0x.
func parseInt(s string, bits int) (int64, error) {
	sign, body := splitSign(s)
	digits, base := hexOrDecimal(body)
	n, err := strconv.ParseInt(sign+digits, base, bits)
	if err != nil || strings.ContainsAny(digits, "+-") { // one sign, before any 0x
		return 0, fmt.Errorf("%q is not an int%d", s, bits)
	}
	return n, nil
}

// parseUint is parseInt for unsigned types; a minus sign is refused.
func parseUint(s string, bits int) (uint64, error) {
	sign, body := splitSign(s)
	digits, base := hexOrDecimal(body)
	n, err := strconv.ParseUint(digits, base, bits)
	if err != nil || sign == "-" {
		return 0, fmt.Errorf("%q is not a uint%d", s, bits)
	}
	return n, nil
}

func splitSign(s string) (sign, body string) {
	if strings.HasPrefix(s, "+") || strings.HasPrefix(s, "-") {
		return s[:1], s[1:]
	}
	return "", s
}

func hexOrDecimal(s string) (string, int) {
	if len(s) > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') {
		return s[2:], 16
	}
	return s, 10
}

// parseDouble reads a double; NaN is refused (every double flag is a ratio
// or a threshold, which NaN would make every comparison skip).
func parseDouble(s string) (float64, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	return f, nil
}

// parseDuration reads a duration as Mooncake's master writes its TTLs: a
// non-negative integer counting unit, or an integer followed by ms, s, m or
// h (any case, blanks around allowed). Go's syntax (1m30s, 1.5s, 250us) is
// accepted too, which Mooncake's parser refuses; docs/master-flags.md says
// so.
func parseDuration(s string, unit time.Duration) (time.Duration, error) {
	t := strings.TrimSpace(s)
	end := 0
	for end < len(t) && t[end] >= '0' && t[end] <= '9' {
		end++
	}
	if end > 0 {
		n, err := strconv.ParseUint(t[:end], 10, 63)
		if err != nil {
			return 0, fmt.Errorf("duration %q is too large", s)
		}
		if mul, ok := durationUnit(strings.TrimSpace(t[end:]), unit); ok {
			if n > uint64(math.MaxInt64/mul) {
				return 0, fmt.Errorf("duration %q is too large", s)
			}
			return time.Duration(n) * mul, nil
		}
	}
	d, err := time.ParseDuration(t)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%q is not a duration (an integer in %s, or with a unit: 500ms, 5s, 2m, 1h)", s, unitName(unit))
	case d < 0:
		return 0, fmt.Errorf("duration %q is negative", s)
	}
	return d, nil
}

// durationUnit maps Mooncake's suffixes; no suffix means the flag's unit.
func durationUnit(suffix string, unit time.Duration) (time.Duration, bool) {
	switch strings.ToLower(suffix) {
	case "":
		return unit, true
	case "ms":
		return time.Millisecond, true
	case "s":
		return time.Second, true
	case "m":
		return time.Minute, true
	case "h":
		return time.Hour, true
	}
	return 0, false
}

func unitName(unit time.Duration) string {
	if unit == time.Second {
		return "seconds"
	}
	return "milliseconds"
}
