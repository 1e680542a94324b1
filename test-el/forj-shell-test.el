;;; forj-shell-test.el --- run_shell and run_tests from Emacs  -*- lexical-binding: t; -*-

;;; Commentary:

;; Commands run by the real worker: their output streams into the
;; `*forj-shell: ID*' buffer in order while Emacs keeps serving timers;
;; a time limit and a stop from Emacs kill the whole command.

;;; Code:

(require 'ert)
(require 'forj-chat)
(require 'forj-flow-test)
(require 'forj-chat-test)

(defun forj-shell-test--approve ()
  "Approve everything in the review buffer, once it shows."
  (should (forj-test--wait-for (lambda () (get-buffer "*forj-review*")) 30))
  (with-current-buffer "*forj-review*"
    (forj-review-approve-all)
    (forj-review-commit)))

(defun forj-shell-test--alive-p (marker)
  "Whether a process whose command line holds MARKER is alive."
  (eq 0 (call-process "pgrep" nil nil nil "-f" marker)))

(ert-deftest forj-test-tools-run-shell-streams-in-order ()
  "Output chunks land in the shell buffer in order, while timers keep firing."
  (forj-test-with-project '(("a.txt" . "a\n"))
    (when (get-buffer "*forj-shell: sh*") (kill-buffer "*forj-shell: sh*"))
    (let* ((ticks 0)
           (timer (run-at-time 0.01 0.01 (lambda () (cl-incf ticks))))
           (run (forj-flow-test--run root "```tool-call
{\"id\": \"sh\", \"name\": \"run_shell\", \"args\": {\"cmd\": \"for i in $(seq 1 300); do echo line $i; [ $((i % 50)) -eq 0 ] && sleep 0.05; done; echo oops >&2\"}}
```
")))
      (unwind-protect
          (progn
            (forj-shell-test--approve)
            (should (forj-test--wait-for (cdr run) 60))
            (let ((result (car (funcall (cdr run)))))
              (should (eq (plist-get result :ok) t))
              (should (equal (plist-get (plist-get result :result) :exit_code) 0)))
            (with-current-buffer "*forj-shell: sh*"
              (let ((text (buffer-string)))
                (should (string-match-p "line 1\nline 2\n" text))
                (should (string-match-p "line 299\nline 300\n" text))
                ;; In order: each line after the one before.
                (should (cl-loop for i from 2 to 300
                                 always (< (string-match (format "^line %d$" (1- i)) text)
                                           (string-match (format "^line %d$" i) text))))
                (should (string-match-p "oops" text))
                (should (string-match-p "\\[finished\\]" text))))
            ;; The header links to the buffer.
            (with-current-buffer (car run)
              (goto-char (point-min))
              (should (search-forward "[output]" nil t))
              (should (button-at (1- (point)))))
            ;; Emacs kept running timers while the command streamed.
            (should (> ticks 5)))
        (cancel-timer timer)
        (kill-buffer (car run))))))

(ert-deftest forj-test-tools-run-shell-timeout ()
  "Seed 001 `forj-test-tools-run-shell-timeout': the limit kills the command and says so."
  (forj-test-with-project '(("a.txt" . "a\n"))
    (let ((run (forj-flow-test--run root "```tool-call
{\"id\": \"t\", \"name\": \"run_shell\", \"args\": {\"cmd\": [\"sleep\", \"41.25\"], \"timeout\": 1}}
```
")))
      (forj-shell-test--approve)
      (should (forj-test--wait-for (cdr run) 30))
      (let ((result (car (funcall (cdr run)))))
        (should (eq (plist-get result :ok) :false))
        (should (equal (plist-get (plist-get result :error) :type) "timeout-error")))
      (should-not (forj-shell-test--alive-p "sleep 41.25"))
      (kill-buffer (car run)))))

(ert-deftest forj-test-chat-stop-mid-tool-kills-the-command ()
  "Stopping the chat while a command runs kills it, cancels the call, and does not resume."
  (forj-chat-test-with-session '(("a.txt" . "a\n"))
      (list (list :text (forj-chat-test--block
                         "{\"id\": \"long\", \"name\": \"run_shell\", \"args\": {\"cmd\": [\"sleep\", \"42.75\"]}}"))
            (list :text "should not be asked for"))
    (forj-chat-test--say "Run it.")
    (forj-shell-test--approve)
    (should (forj-test--wait-for (lambda () (forj-shell-test--alive-p "sleep 42.75")) 30))
    (forj-chat-stop)
    (should (forj-chat-test--wait-idle 10))
    (should (string-match-p "\"type\":\"cancelled\"" (forj-chat--transcript)))
    (should-not (string-match-p "should not be asked for" (buffer-string)))
    (should (forj-test--wait-for (lambda () (not (forj-shell-test--alive-p "sleep 42.75"))) 5))))

(ert-deftest forj-test-tools-run-tests-selector ()
  "Seed 001 `forj-test-tools-run-tests-selector': ERT in a batch Emacs, only the selected tests."
  (forj-test-with-project
      '(("demo-test.el" . ";;; demo-test.el --- t  -*- lexical-binding: t; -*-
(require 'ert)
(ert-deftest demo-good () (should (= 1 1)))
(ert-deftest demo-good-too () (should (equal \"a\" \"a\")))
(ert-deftest demo-bad () (should (= 1 2)))
"))
    (let ((run (forj-flow-test--run root "```tool-call
{\"id\": \"t\", \"name\": \"run_tests\", \"args\": {\"selector\": \"demo-good\"}}
```
```tool-call
{\"id\": \"all\", \"name\": \"run_tests\", \"args\": {}}
```
")))
      (forj-shell-test--approve)
      (should (forj-test--wait-for (cdr run) 60))
      (pcase-let ((`(,picked ,all) (funcall (cdr run))))
        (should (eq (plist-get picked :ok) t))
        (should (equal (plist-get (plist-get picked :result) :total) 2))
        (should (equal (plist-get (plist-get picked :result) :passed) 2))
        (let ((body (or (plist-get all :result) (plist-get (plist-get all :error) :details))))
          (should (equal (plist-get body :total) 3))
          (should (equal (plist-get body :failed) 1))
          (should (string-match-p "demo-bad" (plist-get body :report)))))
      (kill-buffer (car run)))))

(provide 'forj-shell-test)
;;; forj-shell-test.el ends here
