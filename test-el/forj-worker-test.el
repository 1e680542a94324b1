;;; forj-worker-test.el --- Options passed to the worker  -*- lexical-binding: t; -*-

;;; Commentary:

;; The time limits and size caps as Emacs options, through the real
;; worker: a set option changes the effective limit (hello shows it, a
;; real call meets it), a buffer-local value is ignored, a value the
;; worker refuses is a start error that names the option.

;;; Code:

(require 'ert)
(require 'forj-epc-test)

(defun forj-worker-test--effective (worker &rest keys)
  "The effective configuration value under KEYS in WORKER's hello."
  (let ((value (plist-get (plist-get (forj-worker-hello worker) :config) :effective)))
    (dolist (key keys value)
      (setq value (plist-get value key)))))

(defun forj-worker-test--read (worker path)
  "Plan and execute a read_file of PATH on WORKER; return its result plist."
  (let* ((plan (forj-test--call worker "plan"
                                (list :calls (vector (list :id "r" :name "read_file"
                                                           :args (list :path path))))))
         (done (forj-test--call worker "execute"
                                (list :batch_id (plist-get plan :batch_id)))))
    (aref (plist-get done :results) 0)))

(ert-deftest forj-test-worker-option-changes-the-effective-limit ()
  "A non-nil option is sent at start and is the limit the worker applies."
  (forj-test-with-project `(("big.txt" . ,(make-string 3000 ?x)))
    (let ((forj-worker-max-file-read-bytes 2048)
          (forj-worker-shell-timeout 42))
      (let ((worker (forj-test--worker root)))
        (should (equal (forj-worker-test--effective worker :tools :read_file :max_file_read_bytes)
                       2048))
        (should (= (forj-worker-test--effective worker :tools :timeouts :shell_commands_seconds)
                   42))
        ;; Options left at nil keep the configuration's values.
        (should (equal (forj-worker-test--effective worker :tools :output :max_bytes) 102400))
        (should (equal (mapcar (lambda (s) (plist-get s :option))
                               (plist-get (plist-get (forj-worker-hello worker) :config) :settings))
                       '("forj-worker-shell-timeout" "forj-worker-max-file-read-bytes")))
        (let ((result (forj-worker-test--read worker "big.txt")))
          (should (eq (plist-get result :ok) :false))
          (should (string-match-p "over the 2048-byte limit"
                                  (plist-get (plist-get result :error) :message))))))))

(ert-deftest forj-test-worker-buffer-local-option-is-ignored ()
  "Only global values reach the worker, whatever buffer starts it."
  (forj-test-with-project `(("big.txt" . ,(make-string 3000 ?x)))
    (with-temp-buffer
      (setq-local forj-worker-max-file-read-bytes 1024)
      (should (null (forj-worker-settings)))
      (let ((worker (forj-test--worker root)))
        (should (equal (forj-worker-test--effective worker :tools :read_file :max_file_read_bytes)
                       204800))
        (should (eq (plist-get (forj-worker-test--read worker "big.txt") :ok) t))))))

(ert-deftest forj-test-worker-options-are-not-safe-local-variables ()
  "A cloned .dir-locals.el cannot set them without the user being asked."
  (dolist (entry forj-worker--settings)
    (should (risky-local-variable-p (car entry)))
    (should-not (safe-local-variable-p (car entry) 1000))))

(ert-deftest forj-test-worker-refused-option-is-a-start-error-naming-it ()
  "A value out of the worker's range stops the start with the option's name."
  (forj-test-with-project '(("README.md" . "# demo\n"))
    (let ((forj-worker-max-output-bytes 5)
          worker failure)
      (forj-worker-ensure root (lambda (w) (setq worker w)) (lambda (e) (setq failure e)))
      (should (forj-test--wait-for (lambda () (or worker failure)) 30))
      (should-not worker)
      (should (string-match-p
               "\\`forj worker: .*forj-worker-max-output-bytes (tools.output.max_bytes): got 5"
               (plist-get failure :message))))))

;;; The worker's own environment

(defconst forj-worker-test--secrets
  '(("OPENAI_API_KEY" . "sk-proj-oooooooooooooooooooooooooooooooo")
    ("ANTHROPIC_API_KEY" . "sk-ant-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
    ("GEMINI_API_KEY" . "AIzagggggggggggggggggggggggggggggggggg")
    ("GITHUB_TOKEN" . "ghp_hhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhh")
    ("AWS_SECRET_ACCESS_KEY" . "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
    ("MYSQL_PWD" . "correct-horse-battery")
    ("FORJ_TOKEN" . "ffffffffffffffffffffffffffffffff"))
  "Secrets in Emacs's environment, by name.")

(ert-deftest forj-test-worker-holds-no-secret-in-its-own-environ ()
  "Emacs starts the worker without secrets, the token on its stdin.
The program Emacs starts sees no variable named like a secret, and the
running worker's /proc/<pid>/environ holds no provider key, no token,
and no credential under an innocent name (the worker drops that one)."
  (skip-unless (file-readable-p "/proc/self/environ"))
  (forj-test-with-project '(("README.md" . "# demo\n"))
    (let* ((started-with (expand-file-name "started-with.env" home))
           (wrapper (expand-file-name "python" home))
           (innocent "sk-iiiiiiiiiiiiiiiiiiiiiiiiiiiiii")
           (process-environment
            (append (cons (concat "INNOCENT_SETTING=" innocent)
                          (mapcar (lambda (s) (concat (car s) "=" (cdr s)))
                                  forj-worker-test--secrets))
                    process-environment))
           (forj-worker-python wrapper))
      ;; What Emacs starts records its environment, then runs the worker.
      (with-temp-file wrapper
        (insert "#!/bin/sh\nenv > " (shell-quote-argument started-with) "\n"
                "exec " (shell-quote-argument (expand-file-name forj-test--python)) " \"$@\"\n"))
      (set-file-modes wrapper #o700)
      (let* ((worker (forj-test--worker root))
             (pid (process-id (forj-worker-process worker)))
             (environ (with-temp-buffer
                        (set-buffer-multibyte nil)
                        (insert-file-contents-literally (format "/proc/%d/environ" pid))
                        (buffer-string)))
             (given (with-temp-buffer
                      (insert-file-contents started-with)
                      (buffer-string))))
        (dolist (secret forj-worker-test--secrets)
          (should-not (string-match-p (regexp-quote (cdr secret)) given))
          (should-not (string-match-p (concat "^" (car secret) "=") given))
          (should-not (string-match-p (regexp-quote (cdr secret)) environ))
          (should-not (string-match-p (concat "\\(?:\\`\\|\0\\)" (car secret) "=")
                                      environ)))
        (should-not (string-match-p (regexp-quote (forj-worker-token worker)) given))
        (should-not (string-match-p (regexp-quote (forj-worker-token worker)) environ))
        (should-not (string-match-p (regexp-quote innocent) environ))
        ;; The rest of the environment is kept, and the worker answers.
        (should (string-match-p "FORJ_STATE_DIR=" environ))
        (should (null (forj-test--call worker "ping" nil)))))))

(ert-deftest forj-test-worker-stop-lets-the-worker-close-its-journal ()
  "A stopped worker ends by itself (exit 0, not killed), and the next waits for it.
Killed at once, it could lose the journal's note that a reply reached
Emacs, and the next worker would offer that batch for recovery again."
  (forj-test-with-project '(("a.txt" . "alpha\n"))
    (let* ((worker (forj-test--worker root))
           (process (forj-worker-process worker)))
      (forj-test--call worker "ping" '(:x 1))
      (forj-worker-stop root)
      (should (process-live-p process))
      (let ((next (forj-test--worker root)))
        ;; The next worker started only once the stopped one had ended.
        (should-not (process-live-p process))
        (should-not (eq next worker)))
      (should (eq (process-status process) 'exit))
      (should (= (process-exit-status process) 0)))))

(provide 'forj-worker-test)
;;; forj-worker-test.el ends here
