// prefix.go defines the HTTP /query_prefix endpoint: a router asks which
// leading pages of a request the pool holds, per tier and per host
// (master.Core.PrefixLookup), in the shape of Mooncake's conductor
// indexer query (docs/operations.md, "Prefix lookup for routers").

package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/gostore/gostore/gostore/master"
)

// MaxPrefixKeys bounds the keys of one /query_prefix request: 4096 pages
// are a 256k-token context at 64 tokens a page, and a lookup holds no lock
// between keys, so a longer one only delays its own answer.
const MaxPrefixKeys = 4096

// maxPrefixBody bounds a /query_prefix request's bytes, read before any
// key is looked at: MaxPrefixKeys keys of about 2 KiB each (KV cache keys
// are a hash and a prefix, well under 1 KiB).
const maxPrefixBody = 8 << 20

// maxBlockSize bounds block_size (tokens a page) so that pages times
// block_size cannot overflow.
const maxBlockSize = 1 << 20

// prefixQuery is a /query_prefix request: keys are a request's pages in
// order; block_size, when given, turns the counts into tokens as
// Mooncake's longest_matched is (pages times block_size).
type prefixQuery struct {
	Keys      []string `json:"keys"`
	BlockSize *int     `json:"block_size"`
}

// prefixTiers is one prefix length per medium, under Mooncake's names
// (GPU, CPU, DISK): device memory, host memory, the SSD tier.
type prefixTiers struct {
	LongestMatched int `json:"longest_matched"`
	GPU            int `json:"GPU"`
	CPU            int `json:"CPU"`
	Disk           int `json:"DISK"`
}

// prefixAnswer is the /query_prefix answer: the prefix any client can
// read (from whichever host holds each page), and per host the prefix it
// holds itself.
type prefixAnswer struct {
	prefixTiers
	Instances map[string]prefixTiers `json:"instances"`
}

func tiersOf(p master.PrefixCount, blockSize int) prefixTiers {
	return prefixTiers{LongestMatched: p.Matched * blockSize, GPU: p.Device * blockSize,
		CPU: p.Memory * blockSize, Disk: p.Disk * blockSize}
}

// queryPrefix answers POST /query_prefix. A request it cannot read gets
// 400 (405 for another method) with what was wrong, and one log line.
func (s *Server) queryPrefix(w http.ResponseWriter, r *http.Request) {
	q, status, err := s.readPrefixQuery(w, r)
	if err != nil {
		s.log.Warn("query_prefix refused", "remote", r.RemoteAddr, "status", status, "err", err)
		if status == http.StatusMethodNotAllowed {
			w.Header().Set("Allow", http.MethodPost)
		}
		http.Error(w, "query_prefix: "+err.Error(), status)
		return
	}
	if err := s.httpKeys(r, q.Keys); err != nil {
		s.log.Warn("query_prefix refused", "remote", r.RemoteAddr, "status", http.StatusBadRequest, "err", err)
		http.Error(w, "query_prefix: "+err.Error(), http.StatusBadRequest)
		return
	}
	bs := 1
	if q.BlockSize != nil {
		bs = *q.BlockSize
	}
	hit := s.core.PrefixLookup(q.Keys)
	ans := prefixAnswer{prefixTiers: tiersOf(hit.PrefixCount, bs), Instances: make(map[string]prefixTiers, len(hit.Hosts))}
	for _, h := range hit.Hosts {
		ans.Instances[h.Host] = tiersOf(h.PrefixCount, bs)
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(ans)
}

// readPrefixQuery reads and checks a request, refusing it whole before any
// key is looked at: the status to answer with and why.
func (s *Server) readPrefixQuery(w http.ResponseWriter, r *http.Request) (prefixQuery, int, error) {
	var q prefixQuery
	if r.Method != http.MethodPost {
		return q, http.StatusMethodNotAllowed, fmt.Errorf("method %s: POST a JSON object {\"keys\": [...]}", r.Method)
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxPrefixBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&q); err != nil {
		return q, http.StatusBadRequest, jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return q, http.StatusBadRequest, errors.New("the body holds more than one JSON object")
	}
	switch {
	case q.Keys == nil:
		return q, http.StatusBadRequest, errors.New(`"keys" is missing: a list of the request's page keys in order`)
	case len(q.Keys) > MaxPrefixKeys:
		return q, http.StatusBadRequest, fmt.Errorf("%d keys exceed the limit of %d a request", len(q.Keys), MaxPrefixKeys)
	case q.BlockSize != nil && (*q.BlockSize < 1 || *q.BlockSize > maxBlockSize):
		return q, http.StatusBadRequest, fmt.Errorf("block_size %d is not in [1, %d]", *q.BlockSize, maxBlockSize)
	}
	if err := s.core.CheckRequest(q.Keys, nil); err != nil {
		return q, http.StatusBadRequest, err // a key over --max_key_bytes
	}
	return q, 0, nil
}

// jsonError says what was wrong with a body json refused, by field.
func jsonError(err error) error {
	var typeErr *json.UnmarshalTypeError
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &typeErr):
		want := map[string]string{"keys": "a list of strings", "block_size": "a positive integer"}[typeErr.Field]
		if want == "" {
			want = typeErr.Type.String()
		}
		return fmt.Errorf("%q must be %s, not a JSON %s", typeErr.Field, want, typeErr.Value)
	case errors.As(err, &tooBig):
		return fmt.Errorf("a body over %d bytes", tooBig.Limit)
	case errors.Is(err, io.EOF):
		return errors.New(`an empty body: POST a JSON object {"keys": [...]}`)
	}
	return fmt.Errorf("not a JSON object {\"keys\": [...], \"block_size\": n}: %v", err)
}
