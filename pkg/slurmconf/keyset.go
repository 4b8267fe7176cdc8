package slurmconf

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// KeySetFile is the name of auth/slurm's key set file (beside slurm.key); the key Secrets
// of a SlurmCluster hold it under the same name.
const KeySetFile = "slurm.jwks"

// minKeyBytes is the shortest key auth/slurm accepts in a key set.
const minKeyBytes = 16

// CheckKeySet checks a slurm.jwks as Slurm's auth/slurm reads it: every daemon that reads a
// key set it refuses exits (fatal), so a set is checked before it reaches them. The rules
// are auth/slurm's (Slurm 26.05): a JSON object whose "keys" list holds, for each key, a
// unique string "kid", "kty" oct, "alg" HS256 and "k" (base64 or base64url) of at least 16
// bytes; at most one key has "use" "default" (without one, the first key signs); "exp", when
// given, is a Unix time. One rule is ours: the key that signs must not have expired, as
// every daemon would then refuse every credential (Slurm only finds that out per message).
func CheckKeySet(jwks []byte, now time.Time) error {
	var set struct {
		Keys *[]json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(jwks, &set); err != nil {
		return fmt.Errorf(`not a JSON object with a "keys" list: %w`, err)
	}
	if set.Keys == nil || len(*set.Keys) == 0 {
		return fmt.Errorf(`no "keys" list, or an empty one`)
	}
	kids := map[string]bool{}
	keys := make([]checkedKey, len(*set.Keys))
	signing := -1 // the default key's index
	for i, raw := range *set.Keys {
		k, err := checkKey(raw)
		if err != nil {
			return fmt.Errorf("keys[%d]: %w", i, err)
		}
		if kids[k.Kid] {
			return fmt.Errorf("keys[%d]: kid %q is not unique", i, k.Kid)
		}
		kids[k.Kid] = true
		keys[i] = k
		if strings.EqualFold(k.Use, "default") {
			if signing >= 0 {
				return fmt.Errorf("keys[%d]: a second default key (kid %q); at most one key may have \"use\": \"default\"", i, k.Kid)
			}
			signing = i
		}
	}
	if signing < 0 {
		signing = 0
	}
	if exp := keys[signing].Exp; exp != 0 && exp < now.Unix() {
		return fmt.Errorf("keys[%d], the key that signs, expired at %s", signing, time.Unix(exp, 0).UTC().Format(time.RFC3339))
	}
	return nil
}

// checkedKey is a key that passed checkKey: its kid, use and exp (0: none).
type checkedKey struct {
	Kid, Use string
	Exp      int64
}

// checkKey checks one key of a set.
func checkKey(raw json.RawMessage) (checkedKey, error) {
	var k struct {
		Kid any             `json:"kid"`
		Kty any             `json:"kty"`
		Alg any             `json:"alg"`
		K   any             `json:"k"`
		Use any             `json:"use"`
		Exp json.RawMessage `json:"exp"`
	}
	if err := json.Unmarshal(raw, &k); err != nil {
		return checkedKey{}, fmt.Errorf("not a JSON object: %w", err)
	}
	field := func(name string, v any) (string, error) {
		s, ok := v.(string)
		if !ok {
			return "", fmt.Errorf("%q must be a string", name)
		}
		return s, nil
	}
	kid, err := field("kid", k.Kid)
	if err != nil {
		return checkedKey{}, err
	}
	for _, f := range []struct {
		name  string
		value any
		want  string
	}{{"kty", k.Kty, "oct"}, {"alg", k.Alg, "HS256"}} {
		s, err := field(f.name, f.value)
		if err != nil {
			return checkedKey{}, err
		}
		if !strings.EqualFold(s, f.want) {
			return checkedKey{}, fmt.Errorf("%q is %q, not %s", f.name, s, f.want)
		}
	}
	encoded, err := field("k", k.K)
	if err != nil {
		return checkedKey{}, err
	}
	key, err := decodeKey(encoded)
	if err != nil {
		return checkedKey{}, fmt.Errorf(`"k": %w`, err)
	}
	if len(key) < minKeyBytes {
		return checkedKey{}, fmt.Errorf(`"k" is %d bytes; auth/slurm wants at least %d`, len(key), minKeyBytes)
	}
	use, _ := k.Use.(string)
	exp, err := expiry(k.Exp)
	if err != nil {
		return checkedKey{}, err
	}
	return checkedKey{Kid: kid, Use: use, Exp: exp}, nil
}

// decodeKey decodes a key given in base64url or base64, with or without padding.
func decodeKey(s string) ([]byte, error) {
	s = strings.TrimRight(strings.NewReplacer("-", "+", "_", "/").Replace(s), "=")
	return base64.RawStdEncoding.DecodeString(s)
}

// expiry reads "exp": absent or null is 0; a number or a string of one is a Unix time.
func expiry(raw json.RawMessage) (int64, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		s = string(raw)
	}
	exp, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return 0, fmt.Errorf(`"exp" %s is not a Unix time`, raw)
	}
	return exp, nil
}
