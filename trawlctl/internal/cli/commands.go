package cli

// init registers the commands in the order help lists them; each lives in the file of its
// name (pause.go holds pause and resume, robots.go robots check, url.go url normalize, policy.go the policy commands, archive.go and archive_wacz.go the archive commands, dead.go the dead letter commands).
func init() {
	register(seedCmd)
	register(statusCmd)
	register(pauseCmd)
	register(resumeCmd)
	register(tapCmd)
	register(robotsCheckCmd)
	register(urlNormalizeCmd)
	register(explainCmd)
	register(policySetCmd)
	register(policyGetCmd)
	register(policyLsCmd)
	register(policyRmCmd)
	register(policyApplyCmd)
	register(policyLogCmd)
	register(archiveWACZCmd)
	register(reportCmd)
	register(archiveSeedCmd)
	register(archiveForgetCmd)
	register(deadLsCmd)
	register(deadReplayCmd)
	register(deadDropCmd)
}
