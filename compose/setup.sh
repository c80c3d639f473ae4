#!/usr/bin/env bash
# Write what the deployment mounts, into DIR (default: this folder), keeping what exists:
#   DIR/nats/n1.conf..n3.conf, DIR/nats/creds/<user>.nk   fleet nats-config (nkey users)
#   DIR/keys/ledger.key, ledger.vkey                        the log's signing key, shared
#                                                           by the three replicas
#   DIR/keys/operator.key, operator.vkey                    the operator key (control events)
#   DIR/keys/host1.key, host1.pub, host2.key, host2.pub    the sample hosts' seal keys
# Run it with the project installed (`fleet` on PATH; PYTHON: its interpreter, default
# python3). Secrets are written mode 0600 and stay out of git (compose/.gitignore).
set -euo pipefail
dir="${1:-$(dirname "$0")}"
py="${PYTHON:-python3}"
origin="${FLEET_ORIGIN:-fleet-ledger.local/compose}"
mkdir -p "$dir/keys"
fleet nats-config --hosts host1,host2 --cluster 3 --out "$dir/nats" >/dev/null
if [ ! -e "$dir/keys/ledger.key" ]; then
  tmp="$(mktemp -d)"
  fleet keygen "$origin" --out "$tmp" >/dev/null
  mv "$tmp"/*.key "$dir/keys/ledger.key"
  mv "$tmp"/*.vkey "$dir/keys/ledger.vkey"
  rmdir "$tmp"
fi
[ -e "$dir/keys/operator.key" ] || fleet operator keygen --out "$dir/keys" >/dev/null
for host in host1 host2; do
  [ -e "$dir/keys/$host.key" ] || "$py" - "$dir/keys" "$host" <<'PY'
import sys
from pathlib import Path

from agents.host import load_or_create_key

out, name = Path(sys.argv[1]), sys.argv[2]
tmp = out / f".{name}"
tmp.mkdir(exist_ok=True)
load_or_create_key(tmp)  # host.key (0600) and host.pub, as a host writes them
(tmp / "host.key").rename(out / f"{name}.key")
(tmp / "host.pub").rename(out / f"{name}.pub")
tmp.rmdir()
PY
done
echo "wrote $dir/nats and $dir/keys"
