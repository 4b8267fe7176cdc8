# The kubeslurm/login image: sackd (configless, it fetches slurm.conf from slurmctld and
# gives Slurm's commands their credentials) and Slurm's commands, from Debian's packages, the
# same ones the local cluster installs into its Slurm root (deploy/local/slurm-root.sh).
# Build from the repository root:
#   docker build -f deploy/images/Dockerfile.login -t <your-registry>/kubeslurm/login:26.05 .
# NOT BUILT where this file was written (no Docker engine there); the local cluster runs the
# same programs from its Slurm root with the pod runner (deploy/local/podrunner).
# sssd-ldap and libnss-sss: with a LoginSet's sssdConfRef, the login pod runs this image's
# sssd in a second container, and the name service switch (`passwd: files sss`, which
# libnss-sss's installation sets) asks it for the directory's users.
# openssh-server and libpam-sss: with loginSets[].ssh, a third container runs sshd, and
# users log in with their directory password (PAM, pam_sss) or key (sss_ssh_authorizedkeys).
# pam_loginuid is made optional: a container without CAP_AUDIT_CONTROL cannot set it, and
# Debian's sshd PAM stack would refuse every login for it. pam_mkhomedir (enabled with
# pam-auth-update) makes a user's home directory at the first login.
FROM debian:sid-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends sackd slurm-client slurm-wlm-jwt-plugin ca-certificates \
    sssd-ldap libnss-sss libpam-sss openssh-server \
 && sed -i 's/^session\s\+required\s\+pam_loginuid.so/session optional pam_loginuid.so/' /etc/pam.d/sshd \
 && DEBIAN_FRONTEND=noninteractive pam-auth-update --enable mkhomedir \
 && rm -rf /var/lib/apt/lists/*
ENTRYPOINT ["/usr/sbin/sackd"]
