package slurmconf

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestCheckKeySet(t *testing.T) {
	now := time.Unix(2_000_000_000, 0)
	key32 := base64.RawURLEncoding.EncodeToString([]byte(strings.Repeat("k", 32)))
	key := func(kid, extra string) string {
		return `{"kty":"oct","alg":"HS256","kid":"` + kid + `","k":"` + key32 + `"` + extra + `}`
	}
	set := func(keys ...string) string { return `{"keys":[` + strings.Join(keys, ",") + `]}` }
	for _, tc := range []struct {
		name, jwks string
		err        string // "" when accepted
	}{
		{"one key", set(key("a", "")), ""},
		{"rotation: old default, new", set(key("old", `,"use":"default"`), key("new", "")), ""},
		{"default in any case", set(key("old", ""), key("new", `,"use":"DEFAULT"`)), ""},
		{"kty and alg in any case", set(`{"kty":"OCT","alg":"hs256","kid":"a","k":"` + key32 + `"}`), ""},
		{"standard base64 with padding", set(`{"kty":"oct","alg":"HS256","kid":"a","k":"` + base64.StdEncoding.EncodeToString([]byte(strings.Repeat("?", 17))) + `"}`), ""},
		{"an expired key that does not sign", set(key("old", `,"exp":1000`), key("new", `,"use":"default"`)), ""},
		{"exp as a string", set(key("a", `,"exp":"2100000000"`)), ""},

		{"not JSON", `{"keys":[`, "not a JSON object"},
		{"no keys", `{"kys":[]}`, `no "keys" list`},
		{"empty keys", set(), `no "keys" list`},
		{"keys not a list", `{"keys":{}}`, `"keys" list`},
		{"two defaults", set(key("a", `,"use":"default"`), key("b", `,"use":"default"`)), `keys[1]: a second default key (kid "b")`},
		{"kid repeated", set(key("a", ""), key("a", "")), `keys[1]: kid "a" is not unique`},
		{"kid missing", set(`{"kty":"oct","alg":"HS256","k":"` + key32 + `"}`), `keys[0]: "kid" must be a string`},
		{"kid a number", set(`{"kty":"oct","alg":"HS256","kid":1,"k":"` + key32 + `"}`), `"kid" must be a string`},
		{"RSA", set(`{"kty":"RSA","alg":"HS256","kid":"a","k":"` + key32 + `"}`), `"kty" is "RSA", not oct`},
		{"RS256", set(`{"kty":"oct","alg":"RS256","kid":"a","k":"` + key32 + `"}`), `"alg" is "RS256", not HS256`},
		{"k missing", set(`{"kty":"oct","alg":"HS256","kid":"a"}`), `"k" must be a string`},
		{"k not base64", set(`{"kty":"oct","alg":"HS256","kid":"a","k":"not base64!"}`), `"k": illegal base64`},
		{"k short", set(`{"kty":"oct","alg":"HS256","kid":"a","k":"` + base64.RawURLEncoding.EncodeToString([]byte("15 bytes only..")) + `"}`), `"k" is 15 bytes; auth/slurm wants at least 16`},
		{"exp not a time", set(key("a", `,"exp":"soon"`)), `"exp" "soon" is not a Unix time`},
		{"the default key expired", set(key("old", ""), key("new", `,"use":"default","exp":1000`)), "keys[1], the key that signs, expired at 1970-01-01T00:16:40Z"},
		{"the first key signs, and expired", set(key("old", `,"exp":1000`), key("new", "")), "keys[0], the key that signs, expired"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckKeySet([]byte(tc.jwks), now)
			if tc.err == "" {
				assert.NoError(t, err)
			} else if assert.Error(t, err) {
				assert.Contains(t, err.Error(), tc.err)
			}
		})
	}
}
