// configfile.go reads --config_path files in the format of Mooncake's
// master: JSON or YAML by extension, one key per flag.

package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v2"
)

// readConfig returns the settings of a config file and the keys no flag
// reads (Mooncake ignores those silently; Start names them in its warning).
// Keys are the flag names, but client_ttl's, which is client_live_ttl_sec
// as in Mooncake's files; nested maps flatten to dotted keys.
func readConfig(path string) (settings []setting, ignored []string, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("--config_path: %v", err)
	}
	var pairs []keyValue
	switch {
	case strings.HasSuffix(path, ".json"):
		pairs, err = jsonPairs(data)
	case strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml"):
		pairs, err = yamlPairs(data)
	default:
		return nil, nil, fmt.Errorf("--config_path %s: the name must end in .json, .yaml or .yml, which says its format", path)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("--config_path %s: %v", path, err)
	}
	for _, kv := range pairs {
		f := specByKey[kv.key]
		if f == nil {
			ignored = append(ignored, kv.key)
			continue
		}
		settings = append(settings, setting{f, kv.value, fmt.Sprintf("config file %s, key %s", path, kv.key)})
	}
	return settings, ignored, nil
}

type keyValue struct{ key, value string }

func jsonPairs(data []byte) ([]keyValue, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // integers stay exact text
	var root map[string]any
	if err := dec.Decode(&root); err != nil {
		return nil, fmt.Errorf("not a JSON object: %v", err)
	}
	var out []keyValue
	err := flattenJSON("", root, &out)
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key }) // JSON objects have no order
	return out, err
}

func flattenJSON(prefix string, m map[string]any, out *[]keyValue) error {
	for k, v := range m {
		key := join(prefix, k)
		switch v := v.(type) {
		case map[string]any:
			if err := flattenJSON(key, v, out); err != nil {
				return err
			}
		case string:
			*out = append(*out, keyValue{key, v})
		case json.Number:
			*out = append(*out, keyValue{key, v.String()})
		case bool:
			*out = append(*out, keyValue{key, strconv.FormatBool(v)})
		default: // null or a list
			return fmt.Errorf("key %s: %v is not a scalar value", key, v)
		}
	}
	return nil
}

func yamlPairs(data []byte) ([]keyValue, error) {
	var root yaml.MapSlice
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("not a YAML map: %v", err)
	}
	var out []keyValue
	return out, flattenYAML("", root, &out)
}

func flattenYAML(prefix string, m yaml.MapSlice, out *[]keyValue) error {
	for _, item := range m {
		key := join(prefix, fmt.Sprint(item.Key))
		switch v := item.Value.(type) {
		case yaml.MapSlice:
			if err := flattenYAML(key, v, out); err != nil {
				return err
			}
		case string:
			*out = append(*out, keyValue{key, v})
		case bool, int, int64, uint64:
			*out = append(*out, keyValue{key, fmt.Sprint(v)})
		case float64:
			*out = append(*out, keyValue{key, strconv.FormatFloat(v, 'g', -1, 64)})
		default: // null or a list
			return fmt.Errorf("key %s: %v is not a scalar value", key, v)
		}
	}
	return nil
}

func join(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

// nearestKey is the config file key meant by key, which no flag reads:
// the file's key of the flag named key, or the key closest to it (edit
// distance) when it is close enough to be the one meant; "" otherwise.
func nearestKey(key string) string {
	if f := specByName[key]; f != nil && f.fileKey != "" && f.fileKey != "-" {
		return f.fileKey // a flag's name where the file has its own key (client_ttl)
	}
	best, bestD := "", len(key)
	for k := range specByKey {
		if d := editDistance(key, k); d < bestD || d == bestD && k < best {
			best, bestD = k, d
		}
	}
	if close := bestD <= 2 && 2*bestD < len(key) || 4*bestD <= len(key); !close {
		return ""
	}
	return best
}

// editDistance is Levenshtein's distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
