;;; forj-git-test.el --- The git tools in a chat, end to end  -*- lexical-binding: t; -*-

;;; Commentary:

;; A scripted model session against the real worker on a real temporary
;; git repository: the model stages a file that holds a credential and
;; asks to commit it; the user approves both calls; the worker's
;; validators refuse the commit and the model is told which rule, file
;; and line, and nothing is committed.

;;; Code:

(require 'ert)
(require 'forj-chat-test)

(defun forj-git-test--git (root &rest args)
  "Run git with ARGS in ROOT with a fixed identity; return its output."
  (let ((process-environment
         (append '("GIT_AUTHOR_NAME=t" "GIT_AUTHOR_EMAIL=t@example.com"
                   "GIT_COMMITTER_NAME=t" "GIT_COMMITTER_EMAIL=t@example.com")
                 process-environment))
        (default-directory root))
    (with-temp-buffer
      (unless (zerop (apply #'call-process "git" nil t nil args))
        (error "Git %S failed: %s" args (buffer-string)))
      (buffer-string))))

(defconst forj-git-test--key (concat "AKIA" "ABCDEFGHIJKLMNOP")
  "An access key id of the right shape, spelled in two parts.")

(ert-deftest forj-test-git-commit-with-a-staged-secret-is-refused ()
  "A scripted `git_commit' of a staged credential is refused with the violation."
  (skip-unless (executable-find "git"))
  (forj-chat-test-with-session
      `(("README.md" . "# demo\n")
        ("settings.py" . ,(format "DEBUG = False\nAWS_KEY = '%s'\n" forj-git-test--key)))
      (list (list :text (concat "Staging and committing.\n\n"
                                (forj-chat-test--block
                                 "{\"id\": \"a\", \"name\": \"git_add\", \"args\": {\"paths\": [\"settings.py\"]}}")
                                (forj-chat-test--block
                                 "{\"id\": \"c\", \"name\": \"git_commit\", \"args\": {\"message\": \"feat: settings\"}}")))
            (list :text "The commit was refused: settings.py holds a key."))
    ;; The macro made an empty .git for project.el; make it a repository.
    (forj-git-test--git root "init" "-q")
    (forj-git-test--git root "add" "README.md")
    (forj-git-test--git root "commit" "-qm" "start")
    (forj-chat-test--say "Commit the settings.")
    (should (forj-test--wait-for (lambda () (get-buffer "*forj-review*")) 30))
    (with-current-buffer "*forj-review*"
      (should (string-match-p "git add settings.py" (buffer-string)))
      (should (string-match-p "git commit: feat: settings" (buffer-string)))
      (forj-review-approve-all)
      (forj-review-commit))
    (should (forj-chat-test--wait-idle))
    (let ((text (buffer-string))
          (record (forj-session-transcript)))
      (should (string-match-p "✓ git_add" text))
      (should (string-match-p "✗ git_commit" text))
      ;; The model got the violation: rule, level, file and line.
      (should (string-match-p
               "\"rule\":\"secrets.scan\",\"level\":\"blocking\",\"file\":\"settings.py\",\"line\":2"
               record))
      (should (string-match-p "E_VALIDATION_FAIL" record))
      ;; The key itself is never shown back.
      (should-not (string-match-p forj-git-test--key text))
      (should (string-match-p "The commit was refused" text)))
    ;; Staged, not committed.
    (should (equal (forj-git-test--git root "rev-list" "--count" "HEAD") "1\n"))
    (should (equal (forj-git-test--git root "diff" "--cached" "--name-only") "settings.py\n"))))

(provide 'forj-git-test)
;;; forj-git-test.el ends here
