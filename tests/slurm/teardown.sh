#!/bin/sh
# tests/slurm/teardown.sh DIR: stop the daemons tests/slurm/setup.sh DIR
# started (slurmd, slurmctld, munged, by the pids it recorded), cancel
# nothing else, and wait until they are gone: SIGTERM, then SIGKILL after
# 10 s.  Safe to run twice or after a half-done set-up.
set -u
[ $# -eq 1 ] || { echo "usage: tests/slurm/teardown.sh DIR" >&2; exit 2; }
dir=$1
# Jobs still running would outlive slurmd (proctrack/linuxproc): cancel ours first.
if [ -f "$dir/slurm.conf" ] && [ -f "$dir/slurmctld.pid" ]; then
	SLURM_CONF="$dir/slurm.conf" timeout 10 scancel --full --quiet --user=root >/dev/null 2>&1 || true
fi
for d in slurmd slurmctld munged; do
	f=$dir/$d.pid
	[ -f "$f" ] || continue
	pid=$(cat "$f")
	case $pid in ''|*[!0-9]*) rm -f "$f"; continue ;; esac
	kill -TERM "$pid" 2>/dev/null || { rm -f "$f"; continue; }
	i=0
	while kill -0 "$pid" 2>/dev/null; do
		i=$((i + 1))
		[ "$i" -lt 40 ] || { kill -KILL "$pid" 2>/dev/null; sleep 0.25; break; }
		sleep 0.25
	done
	rm -f "$f"
done
exit 0
