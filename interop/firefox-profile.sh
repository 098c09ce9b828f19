#!/usr/bin/env bash
# Makes a fresh Firefox profile for a test run in PROFILE_DIR: nothing but the page (no updates,
# telemetry, safe browsing or connectivity probes) and, given CA_PEM, the run's test CA trusted
# through the profile's own NSS database (`certutil`, libnss3-tools). Used by interop/firefox.sh
# and interop/node/firefox-bidi.mjs.   Usage: bash interop/firefox-profile.sh PROFILE_DIR [CA_PEM]
set -euo pipefail
profile=$1 ca=${2:-}
mkdir -p "$profile"
if [ -n "$ca" ]; then
  certutil -N -d "sql:$profile" --empty-password
  certutil -A -d "sql:$profile" -t "C,," -n sockeye-interop-ca -i "$ca"
fi
# HTTP/2 WebSockets (`network.http.http2.websockets`) are on by default and left so.
cat >"$profile/user.js" <<'JS'
user_pref("app.update.auto", false);
user_pref("app.update.enabled", false);
user_pref("browser.aboutwelcome.enabled", false);
user_pref("browser.safebrowsing.downloads.remote.enabled", false);
user_pref("browser.safebrowsing.malware.enabled", false);
user_pref("browser.safebrowsing.phishing.enabled", false);
user_pref("browser.search.update", false);
user_pref("browser.shell.checkDefaultBrowser", false);
user_pref("browser.startup.homepage_override.mstone", "ignore");
user_pref("datareporting.policy.dataSubmissionEnabled", false);
user_pref("datareporting.healthreport.uploadEnabled", false);
user_pref("extensions.update.enabled", false);
user_pref("network.captive-portal-service.enabled", false);
user_pref("network.connectivity-service.enabled", false);
user_pref("toolkit.telemetry.enabled", false);
JS
