// Package dcgmjobmap ships the Slurm prolog and epilog scripts that keep the DCGM
// exporter's HPC job mapping: in a directory on each GPU node, one file per GPU index
// holding the ids of the Slurm jobs using that GPU (dcgm-exporter --hpc-job-mapping-dir,
// the GPU operator's dcgmExporter.hpcJobMapping). The controller publishes them in a
// ConfigMap for whatever manages slurmd's configuration to install. Sync writes the same
// files for the job mapping agent (pkg/controller/jobmapping), beside the scripts' lines.
package dcgmjobmap

import (
	"context"
	_ "embed"
	"fmt"
	"regexp"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// DefaultDir is the GPU operator's default hpcJobMapping directory.
const DefaultDir = "/var/lib/dcgm-exporter/job-mapping"

// Keys of the scripts in the ConfigMap, as slurm.conf names them once installed:
// Prolog=/etc/slurm/prolog.d/* and Epilog=/etc/slurm/epilog.d/*, with PrologFlags=Alloc.
const (
	PrologKey = "prolog.sh"
	EpilogKey = "epilog.sh"
)

var (
	//go:embed prolog.sh
	prolog string
	//go:embed epilog.sh
	epilog string
	// The one line of each script that says where the files go.
	dirLine = "DIR=${DCGM_JOB_MAPPING_DIR:-" + DefaultDir + "}"
	// A directory the scripts can take verbatim (no quoting, no expansion).
	plainDir = regexp.MustCompile(`^/[A-Za-z0-9._/-]*$`)
)

// Scripts returns the prolog and epilog writing under dir (empty: DefaultDir), by key.
func Scripts(dir string) (map[string]string, error) {
	if dir == "" {
		dir = DefaultDir
	}
	if !plainDir.MatchString(dir) || strings.Contains(dir, "..") {
		return nil, fmt.Errorf("job mapping directory %q: want an absolute path of letters, digits and ._-/", dir)
	}
	out := map[string]string{}
	for key, script := range map[string]string{PrologKey: prolog, EpilogKey: epilog} {
		if strings.Count(script, dirLine) != 1 {
			return nil, fmt.Errorf("%s: no single %q line to set the directory in", key, dirLine)
		}
		out[key] = strings.Replace(script, dirLine, "DIR=${DCGM_JOB_MAPPING_DIR:-"+dir+"}", 1)
	}
	return out, nil
}

// Ensure creates or updates the ConfigMap namespace/name to hold Scripts(dir).
func Ensure(ctx context.Context, c client.Client, namespace, name, dir string) error {
	scripts, err := Scripts(dir)
	if err != nil {
		return err
	}
	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	_, err = controllerutil.CreateOrUpdate(ctx, c, cm, func() error {
		cm.Data = scripts
		return nil
	})
	if err != nil {
		return fmt.Errorf("writing ConfigMap %s/%s: %w", namespace, name, err)
	}
	return nil
}
