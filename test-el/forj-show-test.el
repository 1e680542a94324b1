;;; forj-show-test.el --- What the chat shows of calls, results and refusals  -*- lexical-binding: t; -*-

;;; Commentary:

;; The chat driven by the scripted provider against the real worker:
;; call lines as people read them, a failed command's last lines, folds
;; by size, a search's skipped files, refusals made in Emacs (read-only
;; and unsaved buffers), calls refused before any review, the demo's
;; project, `@' completion, and the small things: plurals, durations
;; after a redraw, saved chats, grants lost with a worker, the model
;; list's errors, context cut to size.

;;; Code:

(require 'ert)
(require 'forj-chat)
(require 'forj-chat-test)
(require 'forj-render-session)

(defun forj-show-test--call (id name args)
  "A tool-call block: call ID of NAME with ARGS (a plist)."
  (forj-chat-test--block (json-serialize (list :id id :name name :args args))))

(defun forj-show-test--visible ()
  "The chat's text as it is on screen: invisible text left out, folds' labels in."
  (let ((pos (point-min)) (pieces nil))
    (while (< pos (point-max))
      (let ((next (min (next-single-char-property-change pos 'invisible)
                       (next-overlay-change pos))))
        (dolist (o (overlays-at pos))
          (when (and (overlay-get o 'before-string) (= (overlay-start o) pos))
            (push (overlay-get o 'before-string) pieces)))
        (unless (invisible-p pos) (push (buffer-substring-no-properties pos next) pieces))
        (setq pos next)))
    (apply #'concat (nreverse pieces))))

(defun forj-show-test--file (root path)
  "The text of PATH under ROOT."
  (with-temp-buffer (insert-file-contents (expand-file-name path root)) (buffer-string)))

(defun forj-show-test--last-user-text ()
  "What the model reads in the last user message (tool results included)."
  (plist-get (car (last (cl-remove-if-not (lambda (m) (equal (plist-get m :role) "user"))
                                          (forj-loop-messages))))
             :text))

;;; Call lines, and calls that cannot run

(ert-deftest forj-test-show-edit-call-line-reads-as-text-and-an-unread-file-is-refused-before-review ()
  "An edit's call line shows its old and new text as written, never escaped JSON;
an edit of a file never read is refused at once: no review, no diff approved in vain."
  (forj-chat-test-with-session '(("greet.py" . "def greet(name):\n    return \"Hello,\" + name\n"))
      (list (list :text (forj-show-test--call "e1" "edit" '(:path "greet.py"
                                                            :old_string "return \"Hello,\" + name"
                                                            :new_string "return f\"Hello, {name}!\"")))
            (list :text "I will read it first."))
    (forj-chat-test--say "Fix greet.")
    ;; Idle without anyone deciding: no review was opened.
    (should (forj-chat-test--wait-idle))
    (should-not (get-buffer "*forj-review*"))
    (let ((text (forj-show-test--visible)))
      (should (string-match-p "^→ edit greet.py: return \"Hello,\" \\+ name → return f\"Hello, {name}!\"$" text))
      (should-not (string-match-p "\\\\\"" text))
      (should (string-match-p "^✗ edit greet.py  · stale-file" text))
      (should (string-match-p "greet.py was not read in this session" text)))
    (should (string-match-p "def greet(name):\n    return \"Hello,\" \\+ name"
                            (forj-show-test--file root "greet.py")))))

;;; Command output

(ert-deftest forj-test-show-failed-command-keeps-its-last-lines-and-exit-code-in-view ()
  "A failed command shows the tail of its output (stdout, then stderr) and its exit code;
the earlier lines are one key away."
  (forj-chat-test-with-session '(("a.txt" . "a\n"))
      (list (list :text (concat
                         (forj-show-test--call
                          "c1" "run_shell"
                          '(:cmd ["sh" "-c" "for i in $(seq 1 60); do echo out $i; done; echo boom >&2; exit 3"]))
                         (forj-show-test--call
                          "t1" "run_tests"
                          '(:command ["sh" "-c" "for i in $(seq 1 30); do echo test $i; done; echo 'FAILED test_x - AssertionError'; exit 1"]))))
            (list :text "It failed."))
    (forj-chat-test--say "Run it.")
    (forj-render-session--approve '(("c1" . t) ("t1" . t)))
    (should (forj-chat-test--wait-idle))
    (let ((text (forj-show-test--visible)))
      (should (string-match-p "^✗ run_shell\\|^✓ run_shell" text))
      (should (string-match-p "^out 60$" text))
      (should (string-match-p "^boom$" text))
      (should (string-match-p "exit code 3" text))
      (should (string-match-p "▸ 41 earlier lines of output (TAB shows them)" text))
      (should-not (string-match-p "^out 1$" text))
      ;; A test run that failed: its output's tail, the failure in view.
      (should (string-match-p "^FAILED test_x - AssertionError$" text))
      (should-not (string-match-p "^test 1$" text)))
    (forj-render-toggle-fold (save-excursion (goto-char (point-min)) (search-forward "out 60")))
    (should (string-match-p "^out 1$" (forj-show-test--visible)))))

;;; Folding by size

(ert-deftest forj-test-show-one-long-line-folds-by-size ()
  "A 98 KB file of one line (base64, say) does not flood the chat: it folds by size."
  (let ((line (apply #'concat (make-list 25000 "QUJD"))))
    (forj-chat-test-with-session `(("blob.b64" . ,(concat line "\n")))
        (list (list :text (forj-show-test--call "r1" "read_file" '(:path "blob.b64")))
              (list :text "A blob."))
      (forj-chat-test--say "Read it.")
      (should (forj-chat-test--wait-idle))
      (let ((text (forj-show-test--visible)))
        (should (string-match-p "^✓ read_file blob.b64  · [0-9]+ lines? · " text))
        (should (string-match-p "▸ [0-9.]+ [KM]iB more of this read_file result (TAB shows it)" text))
        (should (< (length text) 6000))))))

;;; Search

(ert-deftest forj-test-show-search-says-which-files-it-did-not-search ()
  "A search with no match says which files it skipped, and why, so no match is no lie."
  (forj-chat-test-with-session '(("data.txt" . "\0\1needle") ("small.txt" . "nothing\n"))
      (list (list :text (forj-show-test--call "s1" "search" '(:query "needle")))
            (list :text "Nothing."))
    (forj-chat-test--say "Find it.")
    (should (forj-chat-test--wait-idle))
    (let ((text (forj-show-test--visible)))
      (should (string-match-p "^✓ search \"needle\"  · 0 matches · 1 file not searched" text))
      (should (string-match-p "^not searched: 1 binary file (data.txt)$" text)))
    (should (string-match-p "Not searched: 1 binary file (data.txt)" (forj-show-test--last-user-text)))))

;;; Refusals made in Emacs

(ert-deftest forj-test-show-read-only-buffer-refusal-is-the-tools-with-its-path-and-next-step ()
  "An edit of a file whose buffer is read-only is refused as that edit, naming the
file, and the model is told what to do next (not how to write JSON)."
  (forj-chat-test-with-session '(("a.txt" . "old\n"))
      (list (list :text (forj-show-test--call "r1" "read_file" '(:path "a.txt")))
            (list :text (forj-show-test--call "e1" "edit" '(:path "a.txt" :old_string "old" :new_string "new")))
            (list :text "It is read-only."))
    (let ((buffer (find-file-noselect (expand-file-name "a.txt" root)))
          (forj-tools-read-only-buffers 'deny))
      (unwind-protect
          (progn
            (with-current-buffer buffer (setq buffer-read-only t))
            (forj-chat-test--say "Change it.")
            (should (forj-chat-test--wait-idle))
            (let ((text (forj-show-test--visible)))
              (should (string-match-p "^⊘ edit a.txt  · permission-error" text))
              (should (string-match-p "a.txt is read-only in the user's Emacs, so edit was not run" text))
              (should-not (string-match-p "(invalid call)" text)))
            ;; The record's header names the tool and the file too.
            (should (string-match-p "^⊘ a.txt is read-only.* edit a.txt$" (forj-session-transcript)))
            (let ((told (forj-show-test--last-user-text)))
              (should (string-match-p "\"name\":\"edit\"" told))
              (should (string-match-p "C-x C-q" told))
              (should-not (string-match-p "tool-call block" told)))
            (should (equal (forj-show-test--file root "a.txt") "old\n")))
        (kill-buffer buffer)))))

(ert-deftest forj-test-show-saving-an-unsaved-buffer-first-says-what-really-happened ()
  "Saving the user's unsaved changes first makes the file differ from what the model
read: the call says so (not \"never read\"), and nothing is reviewed in vain."
  (forj-chat-test-with-session '(("a.txt" . "old\n"))
      (list (list :text (forj-show-test--call "r1" "read_file" '(:path "a.txt")))
            (list :text (forj-show-test--call "e1" "edit" '(:path "a.txt" :old_string "old" :new_string "new")))
            (list :text "I will read it again."))
    (let* ((buffer (find-file-noselect (expand-file-name "a.txt" root)))
           (forj-tools-unsaved-buffers 'save)
           ;; After the read, before the model's next reply is planned, the
           ;; user types in the file's buffer (a hook: no race with the loop).
           (forj-after-tool-result-functions
            (list (lambda (call _result _root)
                    (when (equal (plist-get call :name) "read_file")
                      (with-current-buffer buffer
                        (goto-char (point-min))
                        (insert "mine\n")))
                    nil))))
      (unwind-protect
          (progn
            (forj-chat-test--say "Change it.")
            (should (forj-chat-test--wait-idle))
            (should (equal (forj-show-test--file root "a.txt") "mine\nold\n"))
            (let ((text (forj-show-test--visible)))
              (should (string-match-p "^✗ edit a.txt  · stale-file" text))
              (should (string-match-p "unsaved changes to a.txt were saved before this call" text))
              (should-not (string-match-p "was not read in this session" text))))
        (with-current-buffer buffer (set-buffer-modified-p nil))
        (kill-buffer buffer)))))

;;; Small ones

(ert-deftest forj-test-show-one-line-and-durations-survive-a-redraw ()
  "A one-line file is \"1 line\"; a header keeps its duration when the chat is
drawn again from its record (a saved chat reopened)."
  (forj-chat-test-with-session '(("one.txt" . "just one\n"))
      (list (list :text (forj-show-test--call "r1" "read_file" '(:path "one.txt")))
            (list :text "One line."))
    (forj-chat-test--say "Read it.")
    (should (forj-chat-test--wait-idle))
    (should (string-match-p "^✓ read_file one.txt  · 1 line · [0-9]+ B · [0-9]+ ms$" (buffer-string)))
    (let* ((file (forj-history-save-chat))
           (id (forj-session-id forj-session))
           (chat (current-buffer)))
      (set-buffer-modified-p nil)
      (kill-buffer chat)
      (let ((again (forj-history-open file)))
        (unwind-protect
            (with-current-buffer again
              (should (equal (forj-session-id forj-session) id))
              (should (string-match-p "^✓ read_file one.txt  · 1 line · [0-9]+ B · [0-9]+ ms$"
                                      (buffer-string))))
          (with-current-buffer again (set-buffer-modified-p nil))
          (kill-buffer again))))))

(ert-deftest forj-test-show-resume-does-not-list-empty-chats ()
  "`forj-resume' lists chats with a message of the user's, not empty ones."
  (forj-chat-test-with-session '(("a.txt" . "a\n"))
      (list (list :text "Hi."))
    (should (forj-history-save-chat))
    (should-not (forj-history-chats root))
    (forj-chat-test--say "Hello.")
    (should (forj-chat-test--wait-idle))
    (forj-history-save-chat)
    (should (= (length (forj-history-chats root)) 1))))

(ert-deftest forj-test-show-worker-crash-says-chat-grants-are-lost ()
  "A worker that dies holding a grant given for a chat says the grant is lost."
  (forj-chat-test-with-session '(("a.txt" . "a\n"))
      (list (list :text (forj-show-test--call "c1" "run_shell" '(:cmd ["echo" "hi"])))
            (list :text "Done."))
    (forj-chat-test--say "Run it.")
    (should (forj-test--wait-for (lambda () (get-buffer "*forj-review*")) 30))
    (with-current-buffer "*forj-review*"
      (forj-review-grant "c1" "session" "run_shell(echo *)")
      (forj-review-commit))
    (should (forj-chat-test--wait-idle))
    (let ((said nil)
          (worker (gethash root forj-worker--by-root)))
      (should worker)
      (cl-letf* ((original (symbol-function 'message))
                 ((symbol-function 'message)
                  (lambda (format-string &rest args)
                    (when format-string (push (apply #'format format-string args) said))
                    (apply original format-string args))))
        (signal-process (forj-worker-process worker) 'KILL)
        (should (forj-test--wait-for
                 (lambda () (cl-some (lambda (m) (string-match-p "stopped" m)) said)) 10)))
      (should (cl-some (lambda (m) (string-match-p "grants given for a chat .* are lost" m)) said)))))

(ert-deftest forj-test-show-model-list-connection-error-is-one-line ()
  "A local server that does not answer is said on one line in the model list."
  (let ((forj-providers (list (list "gone" :family 'openai :url "http://127.0.0.1:9/v1" :model "m" :local t)))
        (answer nil))
    (clrhash forj-models--failed)
    (forj-models-list (forj-provider-get "gone") (lambda (models why) (setq answer (list models why))))
    (should (forj-test--wait-for (lambda () answer) 20))
    (should-not (car answer))
    (should (string-match-p "does not answer" (cadr answer)))
    (should-not (string-match-p "\n" (cadr answer)))
    (should-not (string-match-p "\n" (gethash "gone" forj-models--failed)))))

(ert-deftest forj-test-show-add-context-of-a-large-file-cuts-it-with-a-note ()
  "A file too large to read whole is attached cut, from its start, with a note."
  (let ((big (mapconcat (lambda (i) (format "line %d of a long log file\n" i)) (number-sequence 1 12000) "")))
    (forj-chat-test-with-session `(("big.log" . ,big))
        (list (list :text "Hi."))
      (let ((item 'waiting))
        (forj-context-add-file (expand-file-name "big.log" root) (current-buffer)
                               (lambda (i) (setq item i)))
        (should (forj-test--wait-for (lambda () (not (eq item 'waiting))) 30))
        (should item)
        (should (eq (plist-get item :truncated) t))
        (should (string-prefix-p "line 1 of a long log file\n" (plist-get item :text)))
        (should (string-match-p "\\[… cut by forj: the file is too large to attach whole" (plist-get item :text)))
        (should (<= (plist-get item :bytes) (+ forj-context-max-bytes 200)))))))

;;; The demo, and keys under `make run'

(ert-deftest forj-test-show-demo-copy-is-committed-and-files-open-from-it ()
  "The demo's project is committed (its review warns of nothing untracked), and
the chat's `default-directory' is the project, so C-x C-f starts there."
  (let* ((home (make-temp-file "forj-home-" t))
         (process-environment
          (append (list (concat "FORJ_CONFIG=" (expand-file-name "config.toml" home))
                        (concat "FORJ_STATE_DIR=" (expand-file-name "state" home)))
                  process-environment))
         (default-directory temporary-file-directory)
         (forj-worker-python forj-test--python)
         (forj-provider-scripted-delay 0.001)
         (forj-provider-scripted-chunk 200)
         (chat (forj-demo))
         (root (forj-session-root (buffer-local-value 'forj-session chat))))
    (unwind-protect
        (with-current-buffer chat
          (should (equal (file-name-as-directory default-directory) root))
          (should (equal (with-temp-buffer
                           (call-process "git" nil t nil "-C" root "status" "--porcelain")
                           (buffer-string))
                         ""))
          (forj-chat-test--say "Please fix greet.")
          (should (forj-test--wait-for (lambda () (get-buffer "*forj-review*")) 30))
          (with-current-buffer "*forj-review*"
            (should-not (string-match-p "untracked" (buffer-string)))
            (forj-review-approve-all)
            (forj-review-commit))
          (should (forj-chat-test--wait-idle)))
      (with-current-buffer chat (set-buffer-modified-p nil))
      (kill-buffer chat)
      (forj-worker-stop root)
      (delete-directory root t)
      (delete-directory home t))))

(ert-deftest forj-test-show-at-file-completion-works-on-its-documented-key ()
  "`@' then C-M-i (M-TAB) completes a project file in the chat as `make run' starts
it (no markdown-mode: the parent is text-mode, whose M-TAB is ispell's)."
  (forj-chat-test-with-session '(("greet.py" . "x = 1\n") ("notes.md" . "n\n"))
      (list (list :text "Hi."))
    (should (eq (key-binding (kbd "C-M-i")) #'completion-at-point))
    (should (eq (key-binding (kbd "M-TAB")) #'completion-at-point))
    (goto-char (point-max))
    (insert "look at @gre")
    (call-interactively (key-binding (kbd "C-M-i")))
    (should (looking-back "@greet.py" (line-beginning-position)))
    (should (forj-test--wait-for
             (lambda () (cl-find "greet.py" forj-context-items
                                 :key (lambda (i) (plist-get i :title)) :test #'equal))
             30))))

(provide 'forj-show-test)
;;; forj-show-test.el ends here
