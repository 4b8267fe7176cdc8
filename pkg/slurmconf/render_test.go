package slurmconf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	slurmv1 "github.com/kubeslurm/kubeslurm/api/v1alpha1"
)

func ptr[T any](v T) *T { return &v }

func cluster(spec slurmv1.SlurmClusterSpec) *slurmv1.SlurmCluster {
	return &slurmv1.SlurmCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "hpc", Name: "slurm"}, Spec: spec}
}

// full is a spec with every section that reaches the configuration.
func full() slurmv1.SlurmClusterSpec {
	return slurmv1.SlurmClusterSpec{
		ClusterName: "research",
		Controller:  slurmv1.ControllerSpec{Port: 6817, MaxNodeCount: 512},
		NodeSets:    []slurmv1.NodeSetSpec{{Name: "cpu"}, {Name: "gpu", Features: []string{"a100"}, GPUs: &slurmv1.NodeSetGPUs{}}},
		Partitions: []slurmv1.PartitionSpec{
			{Name: "batch", NodeSets: []string{"cpu", "gpu"}, Default: true, MaxTime: "1-00:00:00", PriorityTier: ptr[int32](1),
				Options: map[string]string{"DefMemPerCPU": "512", "OverSubscribe": "NO"}},
			{Name: "gpu", NodeSets: []string{"gpu"}, State: "UP", PriorityTier: ptr[int32](2)},
		},
		Accounting: &slurmv1.AccountingSpec{
			Database: slurmv1.DatabaseSpec{Host: "mariadb.db.svc", User: "slurm", Name: "research_acct",
				PasswordRef: corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "slurm-db"}, Key: "password"}},
			ExtraConfig: "PurgeJobAfter=12months\nCommitDelay=1",
		},
		ExtraConfig:       "# site settings\nSchedulerParameters=bf_interval=60,bf_window=1440\nPriorityWeightTRES=CPU=1000,Mem=2000\n\nNodeName=static1 CPUs=4 State=FUTURE\n",
		CgroupExtraConfig: "ConstrainRAMSpace=yes",
		DCGMJobMapping:    &slurmv1.DCGMJobMappingSpec{Dir: "/var/lib/dcgm-exporter/job-mapping"},
	}
}

// With a JWKS, slurmctld accepts tokens signed by its keys as well as by the cluster's key.
func TestRenderWithJWKS(t *testing.T) {
	files, err := Render(cluster(slurmv1.SlurmClusterSpec{}), WithJWKS([]byte(`{"keys":[]}`)))
	require.NoError(t, err)
	assert.Equal(t, `{"keys":[]}`, files[JWKSFile])
	assert.Contains(t, files[SlurmConfFile], "\nAuthAltParameters=jwks=/etc/slurm/jwks.json,jwt_key=/etc/slurm/jwt_hs256.key\n")
	plain, err := Render(cluster(slurmv1.SlurmClusterSpec{}))
	require.NoError(t, err)
	assert.NotContains(t, plain, JWKSFile)
	assert.NotEqual(t, plain.Hash(), files.Hash())
}

// Users from a directory (a LoginSet with sssd) are vouched for by the login pods' sackd:
// slurmctld and the workers, without the directory, take the name and groups it sends.
func TestRenderUsersFromDirectory(t *testing.T) {
	plain, err := Render(cluster(slurmv1.SlurmClusterSpec{LoginSets: []slurmv1.LoginSetSpec{{Name: "users"}}}))
	require.NoError(t, err)
	assert.NotContains(t, plain[SlurmConfFile], "AuthInfo")
	sssd := &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "sssd"}, Key: "sssd.conf"}
	files, err := Render(cluster(slurmv1.SlurmClusterSpec{LoginSets: []slurmv1.LoginSetSpec{{Name: "users"}, {Name: "ldap", SSSDConfRef: sssd}}}))
	require.NoError(t, err)
	assert.Contains(t, files[SlurmConfFile], "\nCredType=cred/slurm\nAuthInfo=use_client_ids\n")
}

func TestRenderGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec slurmv1.SlurmClusterSpec
	}{
		{"minimal", slurmv1.SlurmClusterSpec{}},
		{"full", full()},
		{"linuxproc", slurmv1.SlurmClusterSpec{ProcessTracking: slurmv1.ProcessTrackingLinuxProc}},
		{"computedomain", slurmv1.SlurmClusterSpec{ComputeDomain: &slurmv1.ComputeDomainSpec{Enabled: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files, err := Render(cluster(tc.spec))
			require.NoError(t, err)
			for name, text := range files {
				golden(t, tc.name+"."+name, text)
			}
		})
	}
}

// golden compares text with testdata/NAME.golden; UPDATE_GOLDEN=1 rewrites the file.
func golden(t *testing.T, name, text string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if os.Getenv("UPDATE_GOLDEN") == "1" {
		require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "no golden file; run with UPDATE_GOLDEN=1")
	assert.Equal(t, string(want), text)
}

// Issue test 6: every way of smuggling a line or a key of ours into slurm.conf is refused,
// and nothing is rendered.
func TestRenderRefusesInjection(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*slurmv1.SlurmClusterSpec)
		want   string
	}{
		{"newline in a partition option", func(s *slurmv1.SlurmClusterSpec) {
			s.Partitions[0].Options["DefMemPerCPU"] = "512\nAuthType=auth/none"
		}, "control character"},
		{"second key in a partition option", func(s *slurmv1.SlurmClusterSpec) {
			s.Partitions[0].Options["DefMemPerCPU"] = "512 AuthType=auth/none"
		}, "whitespace"},
		{"comment cutting off the rest of a partition line", func(s *slurmv1.SlurmClusterSpec) {
			s.Partitions[0].Options["DefMemPerCPU"] = "512#"
		}, "comment"},
		{"option named like a field of ours", func(s *slurmv1.SlurmClusterSpec) {
			s.Partitions[0].Options["Nodes"] = "ALL"
		}, "set by kubeslurm"},
		{"GresTypes in extra config beside nodeSets[].gpus", func(s *slurmv1.SlurmClusterSpec) {
			s.ExtraConfig = "SchedulerParameters=bf_interval=60 grestypes=gpu,nic"
		}, "grestypes is set by kubeslurm"},
		{"GPU type that would add a GRES", func(s *slurmv1.SlurmClusterSpec) {
			s.NodeSets[1].GPUs.Type = "a100,nic:1"
		}, "not a plain name"},
		{"Prolog in extra config beside dcgmJobMapping", func(s *slurmv1.SlurmClusterSpec) {
			s.ExtraConfig = "Prolog=/etc/slurm/mine.sh"
		}, "Prolog is set by kubeslurm"},
		{"PrologFlags in extra config beside dcgmJobMapping", func(s *slurmv1.SlurmClusterSpec) {
			s.ExtraConfig = "PrologFlags=Contain"
		}, "PrologFlags is set by kubeslurm"},
		{"a job mapping directory that would add a line to the scripts", func(s *slurmv1.SlurmClusterSpec) {
			s.DCGMJobMapping.Dir = "/var/lib/x}\nrm -rf /"
		}, "dcgmJobMapping.dir"},
		{"a job mapping without GPUs", func(s *slurmv1.SlurmClusterSpec) {
			s.NodeSets[1].GPUs = nil
		}, "dcgmJobMapping: no NodeSet has gpus"},
		{"GPUs of Replicas workers", func(s *slurmv1.SlurmClusterSpec) {
			s.NodeSets[1].Mode = slurmv1.NodeSetReplicas
		}, "gpus needs mode DaemonSet"},
		{"process tracking in extra config (spec.processTracking sets it)", func(s *slurmv1.SlurmClusterSpec) {
			s.ExtraConfig = "proctracktype=proctrack/pgid"
		}, "set by kubeslurm"},
		{"reserved key in extra config", func(s *slurmv1.SlurmClusterSpec) {
			s.ExtraConfig = "SlurmctldHost=evil"
		}, "SlurmctldHost is set by kubeslurm"},
		{"reserved key, other case", func(s *slurmv1.SlurmClusterSpec) {
			s.ExtraConfig = "authtype=auth/none"
		}, "set by kubeslurm"},
		{"reserved key after an allowed one on the same line", func(s *slurmv1.SlurmClusterSpec) {
			s.ExtraConfig = "SchedulerParameters=bf_interval=60 AuthAltTypes=auth/none"
		}, "AuthAltTypes is set by kubeslurm"},
		{"carriage return", func(s *slurmv1.SlurmClusterSpec) {
			s.ExtraConfig = "SchedulerParameters=x\rAuthType=auth/none"
		}, "line break"},
		{"NUL", func(s *slurmv1.SlurmClusterSpec) { s.ExtraConfig = "SchedulerParameters=x\x00" }, "NUL"},
		{"line continuation", func(s *slurmv1.SlurmClusterSpec) {
			s.ExtraConfig = "SchedulerParameters=x\\\nAuthType=auth/none"
		}, "escapes"},
		{"continued comment", func(s *slurmv1.SlurmClusterSpec) { s.ExtraConfig = "# note \\\nAuthType=auth/none" }, "line 1"},
		{"Include", func(s *slurmv1.SlurmClusterSpec) { s.ExtraConfig = "Include /etc/passwd" }, "not Key=Value"},
		{"Include as key", func(s *slurmv1.SlurmClusterSpec) { s.ExtraConfig = "Include=/etc/passwd" }, "set by kubeslurm"},
		{"quoted value", func(s *slurmv1.SlurmClusterSpec) {
			s.ExtraConfig = `DownNodes=x Reason="a AuthType=auth/none"`
		}, "quoting"},
		{"bare word", func(s *slurmv1.SlurmClusterSpec) { s.ExtraConfig = "SchedulerParameters=x junk" }, "not Key=Value"},
		{"empty key", func(s *slurmv1.SlurmClusterSpec) { s.ExtraConfig = "=x" }, "not a parameter name"},
		{"partition in extra config", func(s *slurmv1.SlurmClusterSpec) { s.ExtraConfig = "PartitionName=x Nodes=ALL" }, "set by kubeslurm"},
		{"unicode line separator", func(s *slurmv1.SlurmClusterSpec) { s.ExtraConfig = "A=b\u2028AuthType=x" }, "line break"},
		{"cgroup extra owns CgroupPlugin", func(s *slurmv1.SlurmClusterSpec) { s.CgroupExtraConfig = "CgroupPlugin=cgroup/v1" }, "cgroupExtraConfig"},
		{"cluster name with a newline", func(s *slurmv1.SlurmClusterSpec) { s.ClusterName = "a\nAuthType=auth/none" }, "clusterName"},
		{"database host with a space", func(s *slurmv1.SlurmClusterSpec) { s.Accounting.Database.Host = "db AuthType=x" }, "accounting.database.host"},
		{"database user with a newline", func(s *slurmv1.SlurmClusterSpec) { s.Accounting.Database.User = "slurm\nStorageType=x" }, "accounting.database.user"},
		{"database name with a comment", func(s *slurmv1.SlurmClusterSpec) { s.Accounting.Database.Name = "db#x" }, "accounting.database.name"},
		{"password Secret name with a newline", func(s *slurmv1.SlurmClusterSpec) {
			s.Accounting.Database.PasswordRef.Name = "db\nStoragePass=x"
		}, "passwordRef.name"},
		{"password Secret key with a space", func(s *slurmv1.SlurmClusterSpec) { s.Accounting.Database.PasswordRef.Key = "a b" }, "passwordRef.key"},
		{"slurmdbd extra config sets the password", func(s *slurmv1.SlurmClusterSpec) {
			s.Accounting.ExtraConfig = "CommitDelay=1 storagepass=x"
		}, "accounting.extraConfig"},
		{"slurmdbd extra config moves the plugins", func(s *slurmv1.SlurmClusterSpec) { s.Accounting.ExtraConfig = "PluginDir=/tmp" }, "PluginDir is set by kubeslurm"},
		{"slurmdbd extra config with a line break", func(s *slurmv1.SlurmClusterSpec) {
			s.Accounting.ExtraConfig = "CommitDelay=1\rDbdPort=1"
		}, "line break"},
		{"feature with a newline", func(s *slurmv1.SlurmClusterSpec) { s.NodeSets[1].Features = []string{"a\nb=c"} }, "feature"},
		{"node option adding a parameter", func(s *slurmv1.SlurmClusterSpec) {
			s.NodeSets[1].NodeOptions = map[string]string{"RealMemory": "7900 State=DRAIN"}
		}, "nodeSets[gpu]: nodeOptions: RealMemory"},
		{"node option that is another field's", func(s *slurmv1.SlurmClusterSpec) {
			s.NodeSets[1].NodeOptions = map[string]string{"Gres": "gpu:8"}
		}, "not a node parameter a NodeSet may set"},
		{"unknown nodeset", func(s *slurmv1.SlurmClusterSpec) { s.Partitions[1].NodeSets = []string{"nope"} }, "not in spec.nodeSets"},
		{"two defaults", func(s *slurmv1.SlurmClusterSpec) { s.Partitions[1].Default = true }, "at most one"},
		{"bad maxTime", func(s *slurmv1.SlurmClusterSpec) { s.Partitions[1].MaxTime = "1h" }, "maxTime"},
		{"SwitchType while the ComputeDomain sets it", func(s *slurmv1.SlurmClusterSpec) {
			s.ComputeDomain = &slurmv1.ComputeDomainSpec{Enabled: true}
			s.ExtraConfig = "switchtype=switch/hpe_slingshot"
		}, "switchtype is set by kubeslurm"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := full()
			tc.mutate(&spec)
			files, err := Render(cluster(spec))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Nil(t, files)
		})
	}
}

func TestValidateExtraAccepts(t *testing.T) {
	for _, text := range []string{
		"",
		"\n\n",
		"# only a comment",
		"SchedulerParameters=bf_interval=60",
		"  NodeName=n1 CPUs=4 RealMemory=1000\tState=FUTURE  ",
		"PriorityWeightTRES=CPU=1000,Mem=2000,GRES/gpu=3000",
		"SlurmctldTimeout=120\nMessageTimeout=20",
		"SwitchType=switch/hpe_slingshot", // ours only with spec.computeDomain
		"GresTypes=gpu,nic",               // ours only with nodeSets[].gpus
	} {
		assert.NoError(t, ValidateExtra(text), "%q", text)
	}
}

func TestHashFollowsContent(t *testing.T) {
	a, err := Render(cluster(full()))
	require.NoError(t, err)
	b, err := Render(cluster(full()))
	require.NoError(t, err)
	assert.Equal(t, a.Hash(), b.Hash(), "same spec, same hash")
	spec := full()
	spec.Partitions[1].MaxTime = "60"
	c, err := Render(cluster(spec))
	require.NoError(t, err)
	assert.NotEqual(t, a.Hash(), c.Hash())
	assert.Contains(t, c[SlurmConfFile], "PartitionName=gpu Nodes=gpu MaxTime=60 State=UP PriorityTier=2\n")
}

// SwitchType comes with an enabled ComputeDomain only.
func TestRenderSwitchType(t *testing.T) {
	for _, tc := range []struct {
		name string
		cd   *slurmv1.ComputeDomainSpec
		want bool
	}{
		{"no computeDomain", nil, false},
		{"disabled", &slurmv1.ComputeDomainSpec{Enabled: false, Name: "cd"}, false},
		{"enabled", &slurmv1.ComputeDomainSpec{Enabled: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files, err := Render(cluster(slurmv1.SlurmClusterSpec{ComputeDomain: tc.cd}))
			require.NoError(t, err)
			assert.Equal(t, tc.want, strings.Contains(files[SlurmConfFile], "\nSwitchType=switch/nvidia_imex\n"))
		})
	}
}

// A job that asks for no memory gets spec.defMemPerCPU per CPU (1024 MiB when unset), not
// all of each node's memory: none with 0, or when extraConfig gives the default memory
// itself (a comment does not).
func TestRenderDefMemPerCPU(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mem   *int64
		extra string
		want  string // the DefMemPerCPU line kubeslurm writes, "" for none
	}{
		{name: "unset", want: "DefMemPerCPU=1024"},
		{name: "set", mem: ptr[int64](4096), want: "DefMemPerCPU=4096"},
		{name: "zero", mem: ptr[int64](0)},
		{name: "extraConfig DefMemPerNode", mem: ptr[int64](4096), extra: "DefMemPerNode=65536"},
		{name: "extraConfig DefMemPerGPU among others", extra: "MaxJobCount=5000 defmempergpu=16384"},
		{name: "extraConfig DefMemPerCPU", mem: ptr[int64](4096), extra: "DefMemPerCPU=2048"},
		{name: "commented out", extra: "# DefMemPerNode=65536", want: "DefMemPerCPU=1024"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files, err := Render(cluster(slurmv1.SlurmClusterSpec{DefMemPerCPU: tc.mem, ExtraConfig: tc.extra}))
			require.NoError(t, err)
			conf := files[SlurmConfFile]
			ours, _, _ := strings.Cut(conf, "# spec.extraConfig")
			if tc.want == "" {
				assert.NotContains(t, ours, "DefMemPerCPU=")
			} else {
				assert.Contains(t, ours, "\n"+tc.want+"\n")
			}
			assert.Contains(t, conf, tc.extra, "extraConfig kept as written")
		})
	}
}

// slurmdbd.conf comes with spec.accounting only, never holds a password, and follows the
// spec's port and database.
func TestRenderSlurmdbdConf(t *testing.T) {
	files, err := Render(cluster(slurmv1.SlurmClusterSpec{}))
	require.NoError(t, err)
	assert.NotContains(t, files, SlurmdbdConfFile)

	spec := full()
	spec.Accounting.Port = 6929
	spec.Accounting.Database.Port = 3316
	spec.Accounting.Database.Name = ""
	files, err = Render(cluster(spec))
	require.NoError(t, err)
	dbd := files[SlurmdbdConfFile]
	assert.Contains(t, dbd, "\nDbdPort=6929\n")
	assert.Contains(t, dbd, "\nStoragePort=3316\n")
	assert.Contains(t, dbd, "\nStorageLoc=slurm_acct_db\n")
	assert.NotContains(t, strings.ToLower(dbd), "storagepass=")
	assert.Contains(t, files[SlurmConfFile], "\nAccountingStorageHost=slurm-accounting.hpc.svc\nAccountingStoragePort=6929\n")
}

// spec.extraConfigFrom's text (read by the controller) follows spec.extraConfig, checked
// as it is, and counts for the default memory like it.
func TestRenderExtraConfigFrom(t *testing.T) {
	const from = "ConfigMap site-slurm, key slurm.conf"
	spec := full()
	files, err := Render(cluster(spec), WithExtraConfigFrom(from, "MessageTimeout=30\n# site\nMinJobAge=600\n"))
	require.NoError(t, err)
	conf := files[SlurmConfFile]
	assert.True(t, strings.HasSuffix(conf, "NodeName=static1 CPUs=4 State=FUTURE\n\n# spec.extraConfigFrom: "+from+"\nMessageTimeout=30\n# site\nMinJobAge=600\n"), conf)
	plain, err := Render(cluster(spec))
	require.NoError(t, err)
	assert.NotEqual(t, plain.Hash(), files.Hash(), "a change of the text is a change of the configuration")
	empty, err := Render(cluster(spec), WithExtraConfigFrom(from, ""))
	require.NoError(t, err)
	assert.Equal(t, plain, empty, "an empty text adds nothing")

	for text, want := range map[string]string{
		"AuthType=auth/none":                   "authtype is set by kubeslurm",
		"Prolog=/etc/slurm/mine.sh":            "Prolog is set by kubeslurm", // dcgmJobMapping's, as in extraConfig
		"Include /etc/passwd":                  "Include",
		"MinJobAge=600\nSlurmUser=root":        "SlurmUser is set by kubeslurm",
		"SchedulerParameters=a\rAuthType=x":    "line break",
		`DownNodes=n1 State=DOWN Reason="a b"`: "quot",
	} {
		_, err := Render(cluster(full()), WithExtraConfigFrom(from, text))
		require.Error(t, err, text)
		assert.Contains(t, err.Error(), "extraConfigFrom ("+from+"): ", text)
		assert.Contains(t, strings.ToLower(err.Error()), strings.ToLower(want), text)
	}

	mem, err := Render(cluster(slurmv1.SlurmClusterSpec{}), WithExtraConfigFrom(from, "DefMemPerGPU=16384"))
	require.NoError(t, err)
	ours, _, _ := strings.Cut(mem[SlurmConfFile], "# spec.extraConfigFrom")
	assert.NotContains(t, ours, "DefMemPerCPU=", "the text gives the default memory itself")
}
