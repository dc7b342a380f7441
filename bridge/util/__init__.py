"""Small helpers every layer uses: secret redaction, private-file permissions, throttled logs, exit
codes, the service manager's readiness notice, directory watching.
"""
