#!/usr/bin/env bash
# Generates what deploy/secure/nats.conf needs, for tests and demos on one machine:
# a local CA, a server certificate (localhost, 127.0.0.1, ::1 and $MESH_TLS_HOSTS), a
# client certificate per user, NKeys for the node, agents and operator, passwords for
# the callers, and env files that say where everything is.
#
#   bash deploy/secure/gen-local.sh [OUT_DIR]      # default: deploy/secure/local
#
# Output (OUT_DIR):
#   ca.pem ca-key.pem                 the CA (keep ca-key.pem private)
#   server-cert.pem server-key.pem    the server's certificate and key
#   USER-cert.pem USER-key.pem        a client certificate per user (node agents ops alice bob)
#   USER.nk                           NKey seeds (node agents ops): secret, one per process
#   server.env                        MESH_* variables for nats-server (public keys, passwords, paths)
#   USER.env                          NATS_* variables for a client (workflow-node, stub-agents, agent-sdk),
#                                     and MESH_* card settings (signed cards required, the
#                                     example agents' names bound to the agents key)
#
# Needs openssl and python3 (the NKey text encoding); downloads nothing. Files that
# exist are kept, so running it again changes nothing: delete OUT_DIR to start over.
# Real deployments get certificates from their own CA and keys from `nsc`/`nk`.
set -euo pipefail

out="${1:-$(dirname "${BASH_SOURCE[0]}")/local}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
umask 077

NKEY_USERS=(node agents ops)
PASSWORD_USERS=(alice bob)
DAYS=825
# The agents user agents serve (the AGENTS block of nats.conf): their cards must be
# signed by its key, which every other user's env file binds to these names.
AGENT_NAMES=(Echo Doubler ValueClassifier)

# A CA that can sign certificates and nothing else.
if [[ ! -f "$out/ca.pem" ]]; then
  openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 \
    -keyout "$out/ca-key.pem" -out "$out/ca.pem" -days "$DAYS" -subj "/CN=mesh local CA" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
fi

# sign NAME EXTENSIONS: a P-256 key and a certificate for it, signed by the CA.
sign() {
  local name="$1" ext="$2"
  [[ -f "$out/$name-cert.pem" ]] && return 0
  openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 \
    -keyout "$out/$name-key.pem" -out "$out/$name.csr" -subj "/CN=$name" 2>/dev/null
  printf '%b' "$ext" >"$out/$name.ext"
  openssl x509 -req -in "$out/$name.csr" -CA "$out/ca.pem" -CAkey "$out/ca-key.pem" \
    -CAcreateserial -out "$out/$name-cert.pem" -days "$DAYS" -extfile "$out/$name.ext" 2>/dev/null
  rm -f "$out/$name.csr" "$out/$name.ext"
}

# The server's names: loopback, plus any in MESH_TLS_HOSTS (comma-separated).
san="DNS:localhost,IP:127.0.0.1,IP:::1"
IFS=',' read -ra extra <<<"${MESH_TLS_HOSTS:-}"
for host in "${extra[@]}"; do
  host="${host// /}"
  [[ -z "$host" ]] && continue
  if [[ "$host" =~ ^[0-9.]+$ || "$host" == *:* ]]; then san+=",IP:$host"; else san+=",DNS:$host"; fi
done
sign server "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=$san\n"
for user in "${NKEY_USERS[@]}" "${PASSWORD_USERS[@]}"; do
  sign "$user" "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n"
done

# nkey NAME: an ed25519 key from openssl, written as an NKey user seed (NAME.nk, `SU…`)
# and its public key (NAME.pub, `U…`): base32 of prefix, key and CRC-16 (XMODEM).
nkey() {
  local name="$1"
  [[ -f "$out/$name.nk" && -f "$out/$name.pub" ]] && return 0
  openssl genpkey -algorithm ed25519 -outform DER -out "$out/$name.der" 2>/dev/null
  openssl pkey -inform DER -in "$out/$name.der" -pubout -outform DER -out "$out/$name.pub.der" 2>/dev/null
  python3 - "$out/$name.der" "$out/$name.pub.der" "$out/$name.nk" "$out/$name.pub" <<'PY'
import base64, sys

def crc16(data):
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc

def encode(raw):
    raw += crc16(raw).to_bytes(2, "little")
    return base64.b32encode(raw).decode().rstrip("=")

seed = open(sys.argv[1], "rb").read()[-32:]
public = open(sys.argv[2], "rb").read()[-32:]
SEED, USER = 18 << 3, 20 << 3
open(sys.argv[3], "w").write(encode(bytes([SEED | USER >> 5, (USER & 31) << 3]) + seed) + "\n")
open(sys.argv[4], "w").write(encode(bytes([USER]) + public) + "\n")
PY
  rm -f "$out/$name.der" "$out/$name.pub.der"
}
for user in "${NKEY_USERS[@]}"; do nkey "$user"; done
for user in "${PASSWORD_USERS[@]}"; do
  [[ -f "$out/$user.password" ]] || openssl rand -hex 16 >"$out/$user.password"
done

upper() { tr '[:lower:]-' '[:upper:]_' <<<"$1"; }
{
  echo "# For nats-server -c deploy/secure/nats.conf: set -a; . $out/server.env; set +a"
  echo "MESH_TLS_CERT=$out/server-cert.pem"
  echo "MESH_TLS_KEY=$out/server-key.pem"
  echo "MESH_TLS_CA=$out/ca.pem"
  for user in "${NKEY_USERS[@]}"; do echo "MESH_$(upper "$user")_NKEY=$(cat "$out/$user.pub")"; done
  for user in "${PASSWORD_USERS[@]}"; do echo "MESH_$(upper "$user")_PASSWORD=$(cat "$out/$user.password")"; done
} >"$out/server.env"

for user in "${NKEY_USERS[@]}" "${PASSWORD_USERS[@]}"; do
  {
    echo "# Client settings of user $user: set -a; . $out/$user.env; set +a"
    echo "NATS_URL=nats://127.0.0.1:4222"
    echo "NATS_CA=$out/ca.pem"
    echo "NATS_CERT=$out/$user-cert.pem"
    echo "NATS_KEY=$out/$user-key.pem"
    echo "NATS_INBOX_PREFIX=_INBOX.$user"
    if [[ -f "$out/$user.nk" ]]; then
      echo "NATS_NKEY_FILE=$out/$user.nk"
    else
      echo "NATS_USER=$user"
      echo "NATS_PASSWORD=$(cat "$out/$user.password")"
    fi
    # Cards count only when signed by the key bound to their name (first key seen for
    # names not bound here); the agents sign theirs with their user's NKey.
    echo "MESH_REQUIRE_SIGNED_CARDS=true"
    if [[ "$user" == agents ]]; then
      echo "MESH_NKEY_SEED_FILE=$out/agents.nk"
    else
      bindings=()
      for name in "${AGENT_NAMES[@]}"; do bindings+=("$name=$(cat "$out/agents.pub")"); done
      echo "MESH_AGENT_KEYS=$(IFS=,; echo "${bindings[*]}")"
    fi
  } >"$out/$user.env"
done

echo "deploy/secure: CA, certificates, NKeys and passwords in $out"
