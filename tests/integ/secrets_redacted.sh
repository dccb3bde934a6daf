#!/usr/bin/env bash
# No secret in any output: `kvtier config` (text and JSON; from --set, a config file and
# KVTIER_REDIS_URL) shows redis.url and s3.endpoint with the password as ***, and opening
# stores whose s3 endpoint or redis URL carries a password (unreachable, wrong scheme) logs
# errors and warnings - at debug level too - that never contain it, and kvtierd refusing
# a --set never prints its value. Every stdout and stderr of the run is collected and
# grepped.
set -euo pipefail
. "$(dirname "$0")/lib/jq.sh"
K="$KVT_BIN/kvtier"
T=$(mktemp -d "${KVT_TEST_DIR:-/var/tmp}/kvt-secrets-XXXXXX")
trap 'rm -rf "$T"' EXIT
fail() { echo "secrets_redacted: $*"; exit 1; }
RPW=RedisPw-7f3a91 S3PW=S3Pw-c0ffee AWSSK=AwsSecret-5e5e5e
export AWS_ACCESS_KEY_ID=AKIATEST AWS_SECRET_ACCESS_KEY=$AWSSK KVTIER_DEBUG=1
run() { "$@" >>"$T/out" 2>&1 || true; }

# kvtier config, every way a value arrives
KVTIER_REDIS_URL="redis://:$RPW@127.0.0.1:6379/1" run "$K" config
KVTIER_REDIS_URL="redis://:$RPW@127.0.0.1:6379/1" run "$K" config --json
run "$K" config --set "redis.url=redis://alice:$RPW@h:1" --set "s3.endpoint=http://AKIATEST:$S3PW@127.0.0.1:1"
run "$K" config --json --set "s3.endpoint=http://AKIATEST:$S3PW@127.0.0.1:1"
printf '[redis]\nurl = redis://:%s@127.0.0.1:1\n' "$RPW" >"$T/c.ini"
run "$K" config --config "$T/c.ini"
# a section line with text after it is refused, quoting that text's name only (until
# 2026-12-06 its first 40 characters: the password or the secret key with them)
printf '[redis] url = redis://:%s@127.0.0.1:1\n' "$RPW" >"$T/c1.ini"
"$K" config --config "$T/c1.ini" >"$T/c1.out" 2>&1 && fail "a section line with a value was accepted"
grep -q "text after \[redis\]: 'url ...'" "$T/c1.out" || fail "section line refusal not said: $(cat "$T/c1.out")"
printf '[default] aws_secret_access_key = %s\n' "$AWSSK" >"$T/cred"
"$K" stat --dir "$T/d" --tiers dram,s3 --set s3.endpoint=http://127.0.0.1:1 --set s3.bucket=kvt-bucket \
	--set "s3.credentials_file=$T/cred" >"$T/c2.out" 2>&1 && fail "a credentials file with a value on its section line was accepted"
grep -q "text after \[default\]: 'aws_secret_access_key ...'" "$T/c2.out" || fail "credentials refusal not said: $(cat "$T/c2.out")"
cat "$T/c1.out" "$T/c2.out" >>"$T/out"
grep -q 'redis://:\*\*\*@127.0.0.1:6379/1' "$T/out" || fail "redis.url not shown redacted: $(head -c 2000 "$T/out")"
grep -q 'redis://alice:\*\*\*@h:1' "$T/out" || fail "redis.url with a user not shown redacted"
grep -q 'http://AKIATEST:\*\*\*@127.0.0.1:1' "$T/out" || fail "s3.endpoint not shown redacted"
KVTIER_REDIS_URL="redis://:$RPW@127.0.0.1:6379/1" "$K" config --json | jqe '."redis.url" == "redis://:***@127.0.0.1:6379/1"' >/dev/null ||
	fail "config --json is not valid JSON with the redacted URL"

# stores on an unreachable endpoint and server, and a bad scheme: errors and warnings
: >"$T/open"
for ep in "http://AKIATEST:$S3PW@127.0.0.1:1" "ftp://AKIATEST:$S3PW@127.0.0.1:1"; do
	"$K" stat --dir "$T/d" --tiers dram,s3 --set "s3.endpoint=$ep" --set s3.bucket=kvt-bucket \
		--set s3.timeout_ms=300 --set s3.connect_timeout_ms=200 >>"$T/open" 2>&1 || true
done
"$K" stat --dir "$T/d" --tiers dram,redis --set "redis.url=redis://:$RPW@127.0.0.1:1" \
	--set redis.timeout_ms=200 >>"$T/open" 2>&1 || true
"$K" stat --dir "$T/d" --tiers dram,redis --set "redis.url=redis://:$RPW@127.0.0.1:notaport" \
	>>"$T/open" 2>&1 || true
grep -q 'http://AKIATEST:\*\*\*@127.0.0.1:1/kvt-bucket' "$T/open" || fail "s3 open logged no (redacted) URL: $(cat "$T/open")"
grep -q 'ftp://AKIATEST:\*\*\*@' "$T/open" || fail "bad s3 scheme not reported redacted: $(cat "$T/open")"
grep -q 'redis: 127.0.0.1:1 db 0 (auth)' "$T/open" || fail "redis open not logged: $(cat "$T/open")"
# kvtierd refusing its command line: a misspelt key, a value that is not UTF-8, a value
# without its key (each exits 2 before it opens anything)
D="$KVT_BIN/kvtierd"
for s in "redis.uri=redis://:$RPW@10.0.0.1:6379" "redis.url=redis://:$RPW@h:1"$'\xff' \
	"redis://:$RPW@10.0.0.1:6379"; do
	rc=0
	"$D" --dir "$T/kd" --set "$s" >>"$T/kd.out" 2>&1 || rc=$?
	[ "$rc" = 2 ] || fail "kvtierd --set '$s' exited $rc, not 2"
done
grep -q "unknown configuration key 'redis.uri'" "$T/kd.out" || fail "kvtierd's refusal not said: $(cat "$T/kd.out")"
grep -q 'redis.url: not valid UTF-8' "$T/kd.out" || fail "kvtierd's UTF-8 refusal not said: $(cat "$T/kd.out")"
cat "$T/kd.out" >>"$T/out"
# MAC and encryption keys: config names the variable or file, never the key
MACK=5ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7
printf '%s' "$MACK" >"$T/enc.key" && chmod 600 "$T/enc.key"
export KVT_MAC_KEY=$MACK
run "$K" config --set security.mac_key_env=KVT_MAC_KEY --set "security.encryption_key_file=$T/enc.key"
run "$K" session save --synthetic 512 --dir "$T/m" --set security.mac_key_env=KVT_MAC_KEY \
	--set "security.encryption_key_file=$T/enc.key" --set model.layers=2 --set dram.bytes=64MiB
chmod 644 "$T/enc.key"
run "$K" stat --dir "$T/m" --set "security.encryption_key_file=$T/enc.key"
grep -q 'security.mac_key_env *= KVT_MAC_KEY' "$T/out" || fail "config does not show the variable's name"
grep -q 'enc.key is accessible by group or others' "$T/out" || fail "key file mode not refused: $(tail -3 "$T/out")"
cat "$T/open" >>"$T/out"
for s in "$RPW" "$S3PW" "$AWSSK" "$MACK"; do
	if grep -n -- "$s" "$T/out"; then fail "secret '$s' printed"; fi
done
echo "secrets_redacted: ok"
