package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// slurm-token prints one token signed with the key (from a file or standard input) with
// the claims slurmctld's auth/jwt reads; bad input is an error and prints no token.
func TestSlurmTokenCommand(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	keyFile := filepath.Join(t.TempDir(), "jwt_hs256.key")
	require.NoError(t, os.WriteFile(keyFile, key, 0o600))
	empty := filepath.Join(t.TempDir(), "empty.key")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))

	for _, tc := range []struct {
		name     string
		args     []string
		stdin    string
		wantUser string
		wantLife time.Duration
		wantErr  string
	}{
		{name: "key file", args: []string{"--key-file", keyFile, "--user", "alice", "--lifetime", "5m"}, wantUser: "alice", wantLife: 5 * time.Minute},
		{name: "standard input, defaults", args: []string{"--key-file", "-"}, stdin: string(key), wantUser: "slurm", wantLife: 10 * time.Minute},
		{name: "no key file", args: nil, wantErr: `required flag(s) "key-file" not set`},
		{name: "missing key file", args: []string{"--key-file", filepath.Join(t.TempDir(), "missing")}, wantErr: "reading the key"},
		{name: "empty key", args: []string{"--key-file", empty}, wantErr: "key is empty"},
		{name: "empty standard input", args: []string{"--key-file", "-"}, wantErr: "key is empty"},
		{name: "zero lifetime", args: []string{"--key-file", keyFile, "--lifetime", "0s"}, wantErr: "--lifetime must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := newCommand()
			var out, errOut bytes.Buffer
			cmd.SetOut(&out)
			cmd.SetErr(&errOut)
			cmd.SetIn(strings.NewReader(tc.stdin))
			cmd.SetArgs(append([]string{"slurm-token"}, tc.args...))
			before := time.Now().Truncate(time.Second)
			err := cmd.Execute()
			if tc.wantErr != "" {
				assert.ErrorContains(t, err, tc.wantErr)
				assert.Empty(t, out.String(), "no token on an error")
				return
			}
			require.NoError(t, err)

			claims := jwt.MapClaims{}
			tok, err := jwt.ParseWithClaims(strings.TrimSuffix(out.String(), "\n"), claims,
				func(*jwt.Token) (any, error) { return key, nil }, jwt.WithValidMethods([]string{"HS256"}))
			require.NoError(t, err, "signed with the key")
			assert.True(t, tok.Valid)
			assert.Equal(t, tc.wantUser, claims["sun"])
			iat, err := claims.GetIssuedAt()
			require.NoError(t, err)
			exp, err := claims.GetExpirationTime()
			require.NoError(t, err)
			assert.False(t, iat.Before(before), "issued now")
			assert.Equal(t, tc.wantLife, exp.Sub(iat.Time))
		})
	}
}
