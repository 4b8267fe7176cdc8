package main

import (
	"fmt"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// image is one image the runner can run: its repository (matched with any registry in
// front, and any tag or digest) and the entrypoint its Dockerfile sets. A kubeslurm image
// stands for a program in bin/ (Program); a Slurm image (SlurmRoot) for the Slurm root
// filesystem the local cluster runs Slurm from, in which its container's command runs
// chrooted, as in the image built from the same Debian packages (deploy/images/).
type image struct {
	Repository string
	Entrypoint string
	Program    string
	SlurmRoot  bool
}

// images is the table of every image the runner plays kubelet for: Dockerfile.scheduler,
// Dockerfile.controller and deploy/images/Dockerfile.*. A pod with any other image is left
// alone.
var images = []image{
	{Repository: "kubeslurm/scheduler", Entrypoint: "/kubeslurm-scheduler", Program: "kubeslurm-scheduler"},
	{Repository: "kubeslurm/controller", Entrypoint: "/kubeslurm-controller", Program: "kubeslurm-controller"},
	{Repository: "kubeslurm/slurmctld", Entrypoint: "/usr/sbin/slurmctld", SlurmRoot: true},
	{Repository: "kubeslurm/slurmd", Entrypoint: "/usr/sbin/slurmd", SlurmRoot: true},
	{Repository: "kubeslurm/slurmrestd", Entrypoint: "/usr/sbin/slurmrestd", SlurmRoot: true},
	{Repository: "kubeslurm/login", Entrypoint: "/usr/sbin/sackd", SlurmRoot: true},
	{Repository: "kubeslurm/slurmdbd", Entrypoint: "/usr/sbin/slurmdbd", SlurmRoot: true},
}

// repository is ref without its tag or digest.
func repository(ref string) string {
	if i := strings.IndexByte(ref, '@'); i >= 0 {
		ref = ref[:i]
	}
	if i := strings.LastIndexByte(ref, ':'); i > strings.LastIndexByte(ref, '/') {
		ref = ref[:i]
	}
	return ref
}

// lookupImage finds ref's table entry.
func lookupImage(ref string) (image, bool) {
	repo := repository(ref)
	for _, im := range images {
		if repo == im.Repository || strings.HasSuffix(repo, "/"+im.Repository) {
			return im, true
		}
	}
	return image{}, false
}

// AdoptedRegistry is the registry of the images a runner runs on an adopted kwok node
// (--adopt-node): deploy/local/kwok-stages.yaml keeps kwok's stages off a pod whose first
// container's image is under it, and the runner takes exactly the pods all of whose images
// are. Pods of other images on that node stay kwok's fakes.
const AdoptedRegistry = "localhost/"

// runsAdopted: the pod is for a runner that adopted its kwok node.
func runsAdopted(pod *v1.Pod) bool {
	if !ours(pod) {
		return false
	}
	for _, c := range pod.Spec.Containers {
		if !strings.HasPrefix(c.Image, AdoptedRegistry) {
			return false
		}
	}
	return true
}

// ours: every container of the pod has an image of the table.
func ours(pod *v1.Pod) bool {
	if len(pod.Spec.InitContainers) > 0 || len(pod.Spec.Containers) == 0 {
		return false
	}
	for _, c := range pod.Spec.Containers {
		if _, ok := lookupImage(c.Image); !ok {
			return false
		}
	}
	return true
}

// commandLine is the command line of container c. For a kubeslurm image: the image's
// program in binDir with c's args, or c's command when it names the image's entrypoint.
// For a Slurm image: c's command (any program of the root filesystem, as in an image), else
// the entrypoint, with c's args; it runs chrooted into the Slurm root.
func commandLine(binDir string, c *v1.Container) ([]string, error) {
	im, ok := lookupImage(c.Image)
	if !ok {
		return nil, fmt.Errorf("image %s is not in the runner's table", c.Image)
	}
	if im.SlurmRoot {
		if len(c.Command) > 0 {
			if !filepath.IsAbs(c.Command[0]) {
				return nil, fmt.Errorf("command %q: give the program's absolute path (the runner has no PATH lookup in the image)", c.Command[0])
			}
			return append(append([]string{}, c.Command...), c.Args...), nil
		}
		return append([]string{im.Entrypoint}, c.Args...), nil
	}
	args := c.Args
	if len(c.Command) > 0 {
		if c.Command[0] != im.Entrypoint {
			return nil, fmt.Errorf("command %q: only the image's entrypoint %s can run", c.Command[0], im.Entrypoint)
		}
		args = append(append([]string{}, c.Command[1:]...), c.Args...)
	}
	return append([]string{filepath.Join(binDir, im.Program)}, args...), nil
}
