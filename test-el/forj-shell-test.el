;;; forj-shell-test.el --- run_shell and run_tests from Emacs  -*- lexical-binding: t; -*-

;;; Commentary:

;; Commands run by the real worker: their output streams into the
;; `*forj-shell: ID*' buffer in order while Emacs keeps serving timers;
;; the buffer shows the last lines, stops its spinner and ends with the
;; exit code, the duration and a link back to the call; a time limit
;; and a stop from Emacs kill the whole command.

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
                (should (string-match-p "✓ exit code 0 · [0-9.]+ s · back to the call\n\\'" text))))
            ;; The header links to the buffer.
            (with-current-buffer (car run)
              (goto-char (point-min))
              (should (search-forward "[output]" nil t))
              (should (button-at (1- (point)))))
            ;; Emacs kept running timers while the command streamed.
            (should (> ticks 5)))
        (cancel-timer timer)
        (kill-buffer (car run))))))

(defun forj-shell-test--run-command (root id cmd)
  "Run the shell command CMD as call ID in ROOT, approved; return (BUFFER . RESULT)."
  (when (get-buffer (format "*forj-shell: %s*" id)) (kill-buffer (format "*forj-shell: %s*" id)))
  (let ((run (forj-flow-test--run
              root (format "Running it.\n\n```tool-call\n%s\n```\n"
                           (json-serialize (list :id id :name "run_shell" :args (list :cmd cmd)))))))
    (forj-shell-test--approve)
    (should (forj-test--wait-for (cdr run) 60))
    (cons (car run) (car (funcall (cdr run))))))

(ert-deftest forj-test-shell-fr-tui-02-ends-with-exit-code-duration-and-a-link ()
  "FR-TUI-02: the spinner stops; the buffer ends with exit code, duration and a working link."
  (forj-test-with-project '(("a.txt" . "a\n"))
    (pcase-let ((`(,chat . ,result)
                 (forj-shell-test--run-command root "fail" "echo before; sleep 0.3; exit 3")))
      (unwind-protect
          (progn
            ;; A command that exits non-zero is an error result; its details hold the code.
            (should (equal (plist-get (plist-get (plist-get result :error) :details) :exit_code) 3))
            (with-current-buffer "*forj-shell: fail*"
              (should-not forj-shell--running)
              ;; Nothing turns any more: no timer, no spinner frame in the header line.
              (should-not forj-shell--spinner-timer)
              (let ((header (forj-shell--header-line)))
                (should (string-match-p "✗ exit code 3 · [0-9.]+ s" header))
                (should-not (cl-some (lambda (frame) (string-match-p frame header))
                                     forj-shell--spinner-frames)))
              (should-not (cl-some (lambda (frame) (string-match-p frame (buffer-string)))
                                   forj-shell--spinner-frames))
              ;; The worker's duration: at least the 0.3 s the command slept.
              (goto-char (point-max))
              (forward-line -1)
              (should (looking-at "✗ exit code 3 · \\([0-9.]+\\) s · back to the call$"))
              (should (>= (string-to-number (match-string 1)) 0.3))
              (should (memq 'forj-shell-failed (ensure-list (get-text-property (point) 'face))))
              ;; The link leads to the call's block in the conversation.
              (search-forward "back to the call")
              (save-window-excursion
                (push-button (1- (point)))
                (should (eq (current-buffer) chat))
                (should (looking-at-p "```tool-call\n{\"id\":\"fail\""))))
            ;; The same from the command's key.
            (with-current-buffer "*forj-shell: fail*"
              (save-window-excursion
                (forj-shell-visit-call)
                (should (eq (current-buffer) chat)))))
        (kill-buffer chat)))))

(ert-deftest forj-test-shell-fr-tui-03-shows-the-last-lines ()
  "FR-TUI-03: by default only the last 50 lines show; the rest are a toggle away."
  (forj-test-with-project '(("a.txt" . "a\n"))
    (pcase-let ((`(,chat . ,result)
                 (forj-shell-test--run-command root "many" "seq 1 300")))
      (unwind-protect
          (with-current-buffer "*forj-shell: many*"
            (should (eq (plist-get result :ok) t))
            (should (= forj-shell-visible-lines 50))
            (cl-flet ((shown-p (n)
                        (save-excursion
                          (goto-char (point-min))
                          (re-search-forward (format "^%d$" n))
                          (not (invisible-p (match-beginning 0))))))
              ;; Lines 1 to 250 are hidden, 251 to 300 shown, and so is the end.
              (should-not (shown-p 1))
              (should-not (shown-p 250))
              (should (shown-p 251))
              (should (shown-p 300))
              (should-not (invisible-p (1- (point-max))))
              ;; The summary line stays, and the hidden lines are counted.
              (should-not (invisible-p (point-min)))
              (should (string-match-p "250 earlier lines hidden"
                                      (overlay-get forj-shell--fold 'before-string)))
              (should (string-match-p "last 50 lines shown" (forj-shell--header-line)))
              ;; Every line stays in the buffer: the toggle shows them.
              (forj-shell-toggle-all)
              (should (shown-p 1))
              (should (shown-p 250))
              (forj-shell-toggle-all)
              (should-not (shown-p 1))
              (let ((forj-shell-visible-lines 10))
                (forj-shell--update-fold)
                (should-not (shown-p 290))
                (should (shown-p 291)))))
        (kill-buffer chat)))))

(ert-deftest forj-test-shell-chunks-cut-mid-line-count-and-fold-right ()
  "Output cut anywhere, stderr among it, counts its lines and folds as if whole."
  (let ((buffer (forj-shell-buffer "cut" "Run seq")))
    (unwind-protect
        (let ((text (mapconcat #'number-to-string (number-sequence 1 120) "\n"))
              (pos 0) (n 0))
          (while (< pos (length text))
            (let ((next (min (length text) (+ pos 1 (% (* 7 n) 23)))))
              (forj-shell-append buffer (if (= 0 (% n 5)) "stderr" "stdout")
                                 (substring text pos next))
              (setq pos next n (1+ n))))
          (forj-shell-append buffer "stdout" "\n")
          (with-current-buffer buffer
            (should (= forj-shell--lines 120))
            (should (equal (buffer-substring-no-properties forj-shell--output-start
                                                           forj-shell--output-end)
                           (concat text "\n")))
            (should (string-match-p "70 earlier lines hidden"
                                    (overlay-get forj-shell--fold 'before-string)))
            (should (text-property-any forj-shell--output-start forj-shell--output-end
                                       'face 'forj-shell-stderr))))
      (forj-shell-finish buffer t)
      (kill-buffer buffer))))

(ert-deftest forj-test-shell-output-copied-from-the-connection-is-decoded ()
  "Output handed over as bytes in another buffer arrives as the same text."
  (let ((buffer (forj-shell-buffer "bytes" "Run printf"))
        (bytes (generate-new-buffer " *forj-test-bytes*"))
        (text "ascii first\nthen é ✓ 😀\nand \"quotes\" \\ too\n"))
    (unwind-protect
        (progn
          (with-current-buffer bytes
            (set-buffer-multibyte nil)
            (insert "junk before" (encode-coding-string text 'utf-8) "junk after"))
          (let ((from (1+ (length "junk before"))))
            (forj-shell-append buffer "stdout"
                               (forj-epc--make-output
                                :buffer bytes :start from
                                :end (+ from (string-bytes text))))
            (forj-shell-append buffer "stderr"
                               (forj-epc--make-output :buffer bytes :start 1 :end 5 :ascii t)))
          (with-current-buffer buffer
            (should (equal (buffer-substring-no-properties forj-shell--output-start
                                                           forj-shell--output-end)
                           (concat text "junk")))
            (should (= forj-shell--lines 3))
            (should (eq (get-text-property (- forj-shell--output-end 1) 'face)
                        'forj-shell-stderr))))
      (forj-shell-finish buffer t)
      (kill-buffer bytes)
      (kill-buffer buffer))))

(ert-deftest forj-test-shell-opens-where-the-option-says ()
  "The [output] link shows the output buffer through `forj-display-shell'; q puts the windows back."
  (forj-test-with-project '(("a.txt" . "a\n"))
    (pcase-let ((`(,chat . ,_result) (forj-shell-test--run-command root "where" "echo hi")))
      (unwind-protect
          (save-window-excursion
            (delete-other-windows)
            (switch-to-buffer chat)
            (let ((before (window-list)))
              (goto-char (point-min))
              (search-forward "[output]")
              (push-button (1- (point)))
              (let ((window (get-buffer-window "*forj-shell: where*")))
                (should window)
                (should (eq (selected-window) window))
                (should (eq (window-parameter window 'window-side) 'bottom)))
              (quit-window)
              (should (equal (window-list) before))
              (should (eq (window-buffer (selected-window)) chat))))
        (kill-buffer chat)))))

(ert-deftest forj-test-shell-max-bytes-keeps-one-count-of-what-it-removed ()
  "Past `forj-shell-max-bytes' the oldest lines go; one line counts them all."
  (let ((forj-shell-max-bytes 200)
        (buffer (forj-shell-buffer "trim-test" "run_shell")))
    (unwind-protect
        (progn
          (dotimes (i 100) (forj-shell-append buffer "stdout" (format "line %d\n" i)))
          (forj-shell-finish buffer t)
          (with-current-buffer buffer
            (let ((text (buffer-substring-no-properties (point-min) (point-max))))
              (should (<= (buffer-size) 300))
              (should (= (how-many "older output removed" (point-min) (point-max)) 1))
              ;; What was removed and what is left add up to all that was written.
              (should (string-match "\\[\\.\\.\\. \\([0-9]+\\) characters of older output removed" text))
              (should (= (+ (string-to-number (match-string 1 text))
                            (length (substring text (string-match "^line " text)
                                               (string-match "^✓" text))))
                         (cl-loop for i below 100 sum (length (format "line %d\n" i)))))
              (should (string-match-p "^line 99\n✓ finished" text))
              (should (= forj-shell--lines (how-many "^line " (point-min) (point-max)))))))
      (kill-buffer buffer))))

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
    (should (string-match-p "\"type\":\"cancelled\"" (forj-session-transcript)))
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
