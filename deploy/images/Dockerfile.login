# The kubeslurm/login image: sackd (configless, it fetches slurm.conf from slurmctld and
# gives Slurm's commands their credentials) and Slurm's commands, from Debian's packages, the
# same ones the local cluster installs into its Slurm root (deploy/local/slurm-root.sh).
# Build from the repository root:
#   docker build -f deploy/images/Dockerfile.login -t <your-registry>/kubeslurm/login:26.05 .
# NOT BUILT where this file was written (no Docker engine there); the local cluster runs the
# same programs from its Slurm root with the pod runner (deploy/local/podrunner).
# A LoginSet's sssd.conf is mounted at /etc/sssd/sssd.conf; this image does not run sssd
# (add sssd and a process supervisor to use it).
FROM debian:sid-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends sackd slurm-client slurm-wlm-jwt-plugin ca-certificates \
 && rm -rf /var/lib/apt/lists/*
ENTRYPOINT ["/usr/sbin/sackd"]
