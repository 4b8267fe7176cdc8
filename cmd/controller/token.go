package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/kubeslurm/kubeslurm/pkg/slurm"
)

// newTokenCommand is `kubeslurm-controller slurm-token`: it prints a JWT for a Slurm user,
// signed (HS256) with a Slurm cluster's auth/jwt key the way the controller and scheduler
// sign their own, for people and scripts reaching that Slurm from outside (slurmrestd's
// X-SLURM-USER-TOKEN, or SLURM_JWT for Slurm's commands). Nothing long-lived is stored.
func newTokenCommand() *cobra.Command {
	var keyFile, user string
	var lifetime time.Duration
	cmd := &cobra.Command{
		Use:   "slurm-token",
		Short: "Prints a short-lived Slurm JWT signed with an auth/jwt key (e.g. a SlurmCluster's <name>-jwt-key Secret)",
		Example: `  kubectl get secret -n slurm slurm-jwt-key -o jsonpath='{.data.jwt_hs256\.key}' | base64 -d |
    kubeslurm-controller slurm-token --key-file - --user slurm --lifetime 10m`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if lifetime <= 0 {
				return fmt.Errorf("--lifetime must be positive, not %s", lifetime)
			}
			var key []byte
			var err error
			if keyFile == "-" {
				key, err = io.ReadAll(cmd.InOrStdin())
			} else {
				key, err = os.ReadFile(keyFile)
			}
			if err != nil {
				return fmt.Errorf("reading the key: %w", err)
			}
			token, err := slurm.MintHS256(key, user, lifetime)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), token)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&keyFile, "key-file", "", "the auth/jwt HS256 key (AuthAltParameters=jwt_key=...); - reads it from standard input")
	f.StringVar(&user, "user", "slurm", "the Slurm user the token is for (its sun claim)")
	f.DurationVar(&lifetime, "lifetime", 10*time.Minute, "how long the token is valid")
	_ = cmd.MarkFlagRequired("key-file")
	return cmd
}
