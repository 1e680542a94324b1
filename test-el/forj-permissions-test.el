;;; forj-permissions-test.el --- Modes per chat, standing grants, the worker's tools mode  -*- lexical-binding: t; -*-

;;; Commentary:

;; Consent as the user meets it, against the real worker: a grant given
;; with one key in the real review buffer lets the next call it covers
;; run without a review, while other calls and other chats are still
;; asked; a project grant is listed and revoked in `forj-permissions'; an
;; unanswered review closes as a denial.  On the wire to the local
;; provider server: a read-only chat advertises no tool that writes, and
;; a worker configured with tools disabled advertises none.

;;; Code:

(require 'ert)
(require 'forj-chat)
(require 'forj-permissions)
(require 'forj-epc-test)
(require 'forj-provider-test)
(require 'forj-chat-test)

(defun forj-permissions-test--kill-review ()
  "Kill a review buffer a failed test left behind."
  (let ((stale (get-buffer "*forj-review*")))
    (when stale
      (with-current-buffer stale (setq forj-review-callback nil))
      (kill-buffer stale))))

(defun forj-permissions-test--run (buffer root calls)
  "Run CALLS (plists) as one batch from BUFFER in ROOT.
Wait until a review opens or the batch ends; return (REVIEW . RESULTS)
where REVIEW is the review buffer or nil, and RESULTS a function
returning the results once the batch has ended."
  (forj-permissions-test--kill-review)
  (let ((results 'waiting))
    (with-current-buffer buffer
      (let ((start (point-max)))
        (goto-char (point-max))
        (dolist (call calls) (insert "```tool-call\n" (json-serialize call) "\n```\n"))
        (forj-tools-run-region start (point-max) (lambda (r) (setq results r)) root)))
    (forj-test--wait-for (lambda () (or (get-buffer "*forj-review*") (not (eq results 'waiting)))) 30)
    (cons (get-buffer "*forj-review*") (lambda () (unless (eq results 'waiting) results)))))

(defun forj-permissions-test--shell (id &rest argv)
  "A run_shell call with ID running ARGV."
  (list :id id :name "run_shell" :args (list :cmd (vconcat argv))))

(defun forj-permissions-test--keys (review keys)
  "Type KEYS in REVIEW, its window selected, as the user would."
  (let ((forj-review-input-delay 0))
    (select-window (get-buffer-window review))
    (execute-kbd-macro (kbd keys))))

(defun forj-permissions-test--error-kind (result)
  "The `details.kind' of RESULT's error, or nil."
  (plist-get (plist-get (plist-get result :error) :details) :kind))

(defmacro forj-permissions-test-with-chats (&rest body)
  "Run BODY with `one' and `two', two buffers that run batches as two chats."
  (declare (indent 0) (debug t))
  `(save-window-excursion
     (let ((one (generate-new-buffer "*forj-permissions-test-one*"))
           (two (generate-new-buffer "*forj-permissions-test-two*")))
       (unwind-protect
           (progn (delete-other-windows) (switch-to-buffer one) ,@body)
         (forj-permissions-test--kill-review)
         (kill-buffer one)
         (kill-buffer two)))))

(ert-deftest forj-test-permissions-session-grant-from-one-key ()
  "`s' in the review grants the proposed rule: the next matching call of the chat runs unasked.
A call the rule does not cover is still reviewed, and so is a matching
call of another chat: a session grant holds for one chat."
  (forj-test-with-project '(("a.txt" . "a\n"))
    (forj-permissions-test-with-chats
      (let* ((run (forj-permissions-test--run one root (list (forj-permissions-test--shell "e1" "echo" "first"))))
             (review (car run)))
        (should review)
        (with-current-buffer review
          ;; Why it is reviewed, and the rule a grant would use.
          (should (string-match-p "why: reviewed: run_shell always asks in 'ask'" (buffer-string)))
          (should (string-match-p "a grant would cover: run_shell(echo \\*)" (buffer-string))))
        (forj-permissions-test--keys review "s RET")
        (with-current-buffer review
          (should (string-match-p "\\[granted\\] .*Run echo first" (buffer-string)))
          (should (string-match-p "grant: for this chat, rule run_shell(echo \\*)" (buffer-string))))
        (forj-permissions-test--keys review "C-c C-c")
        (should (forj-test--wait-for (cdr run) 30))
        (let ((result (car (funcall (cdr run)))))
          (should (eq (plist-get result :ok) t))
          (should (string-match-p "first" (plist-get (plist-get result :result) :stdout))))
        ;; The worker stored it for this chat's session.
        (let* ((worker (forj-test--worker root))
               (mine (plist-get (forj-test--call worker "grants"
                                                 (list :session (with-current-buffer one (forj-tools-session-id))))
                                :grants))
               (theirs (plist-get (forj-test--call worker "grants"
                                                   (list :session (with-current-buffer two (forj-tools-session-id))))
                                  :grants)))
          (should (= (length mine) 1))
          (should (equal (plist-get (aref mine 0) :rule) "run_shell(echo *)"))
          (should (equal (plist-get (aref mine 0) :scope) "session"))
          (should (= (length theirs) 0))))
      ;; The next matching call of the same chat: no review.
      (let ((run (forj-permissions-test--run one root (list (forj-permissions-test--shell "e2" "echo" "second")))))
        (should-not (car run))
        (should (forj-test--wait-for (cdr run) 30))
        (should (string-match-p "second" (plist-get (plist-get (car (funcall (cdr run))) :result) :stdout))))
      ;; A call the rule does not cover: reviewed.
      (let ((run (forj-permissions-test--run one root (list (forj-permissions-test--shell "p1" "printf" "x")))))
        (should (car run))
        (forj-permissions-test--keys (car run) "q")
        (should (forj-test--wait-for (cdr run) 30))
        (should (equal (forj-permissions-test--error-kind (car (funcall (cdr run)))) "UserDenied")))
      ;; The same command from another chat: reviewed.
      (let ((run (forj-permissions-test--run two root (list (forj-permissions-test--shell "e3" "echo" "third")))))
        (should (car run))
        (forj-permissions-test--keys (car run) "q")
        (should (forj-test--wait-for (cdr run) 30))
        (should (equal (forj-permissions-test--error-kind (car (funcall (cdr run)))) "UserDenied"))))))

(ert-deftest forj-test-permissions-timed-grant-with-an-edited-rule ()
  "`m' asks for minutes, then the rule, which the user may narrow; the grant expires then."
  (forj-test-with-project '(("a.txt" . "a\n"))
    (forj-permissions-test-with-chats
      (let ((run (forj-permissions-test--run one root (list (forj-permissions-test--shell "e1" "echo" "one")))))
        (should (car run))
        ;; 5 minutes; the proposed rule run_shell(echo *) narrowed to echo one*.
        (forj-permissions-test--keys (car run) "m 5 RET C-a C-k run_shell(echo SPC one*) RET")
        (with-current-buffer (car run)
          (should (string-match-p "grant: for 5 minutes in this chat, rule run_shell(echo one\\*)"
                                  (buffer-string))))
        (forj-permissions-test--keys (car run) "C-c C-c")
        (should (forj-test--wait-for (cdr run) 30))
        (let* ((worker (forj-test--worker root))
               (grant (aref (plist-get (forj-test--call worker "grants"
                                                        (list :session (with-current-buffer one (forj-tools-session-id))))
                                       :grants)
                            0)))
          (should (equal (plist-get grant :rule) "run_shell(echo one*)"))
          (should (equal (plist-get grant :scope) "minutes"))
          (should (< (abs (- (plist-get grant :expires_at) (+ (float-time) 300))) 30))))
      ;; The narrowed rule covers `echo one more', not `echo two'.
      (let ((run (forj-permissions-test--run one root (list (forj-permissions-test--shell "e2" "echo" "one" "more")))))
        (should-not (car run))
        (should (forj-test--wait-for (cdr run) 30)))
      (let ((run (forj-permissions-test--run one root (list (forj-permissions-test--shell "e3" "echo" "two")))))
        (should (car run))
        (forj-permissions-test--keys (car run) "q")
        (should (forj-test--wait-for (cdr run) 30))))))

(ert-deftest forj-test-permissions-grant-keys-refuse-a-review-no-grant-can-lift ()
  "A call reviewed because it asks for network offers no rule; a grant key says why and grants nothing."
  (forj-test-with-project '(("a.txt" . "a\n"))
    (forj-permissions-test-with-chats
      (let ((run (forj-permissions-test--run
                  one root (list (list :id "n" :name "run_shell"
                                       :args (list :cmd ["curl" "-sS" "https://example.org"] :allow_network t))))))
        (should (car run))
        (with-current-buffer (car run)
          (should-not (string-match-p "a grant would cover" (buffer-string))))
        (dolist (key '("s" "m" "!"))
          ;; Said at once: `m' does not ask for minutes first.
          (should (string-match-p "No grant can lift this review"
                                  (condition-case err
                                      (progn (forj-permissions-test--keys (car run) key) nil)
                                    (user-error (cadr err))))))
        (with-current-buffer (car run)
          (should-not (gethash "n" forj-review--grants))
          (should-not (gethash "n" forj-review--decisions)))
        (forj-permissions-test--keys (car run) "q")
        (should (forj-test--wait-for (cdr run) 30))))))

(ert-deftest forj-test-permissions-review-timeout-is-a-denial ()
  "With permission_timeout_seconds set, an unanswered review closes by itself and the call is denied."
  (forj-test-with-project '(("a.txt" . "a\n"))
    (with-temp-file (expand-file-name "config.toml" home)
      (insert "[permissions]\npermission_timeout_seconds = 1\n"))
    (forj-permissions-test-with-chats
      (let* ((run (forj-permissions-test--run one root (list (forj-permissions-test--shell "e1" "echo" "late"))))
             (review (car run)))
        (should review)
        (with-current-buffer review
          (should (string-match-p "Unanswered, this review closes at .* (after 1 s) with every call denied"
                                  (buffer-string))))
        (should (forj-test--wait-for (cdr run) 10))
        (should-not (buffer-live-p review))
        (let ((result (car (funcall (cdr run)))))
          (should (equal (plist-get (plist-get result :error) :type) "permission-error"))
          (should (equal (forj-permissions-test--error-kind result) "UserDenied"))
          (should (eq (plist-get (plist-get (plist-get result :error) :details) :timed_out) t)))))))

(ert-deftest forj-test-permissions-project-grant-listed-and-revoked ()
  "`!' in a chat's review grants for the project: another chat runs the call unasked.
`forj-permissions' lists the grant with its scope and rule; revoked
there, the call is reviewed again."
  (forj-chat-test-with-session '(("src/a.py" . "a = 1\n"))
      (list (list :text (forj-chat-test--block
                         "{\"id\": \"w1\", \"name\": \"write_file\", \"args\": {\"path\": \"src/b.py\", \"content\": \"b = 2\\n\"}}"))
            (list :text "Written."))
    (forj-chat-test--say "Write src/b.py")
    (should (forj-test--wait-for (lambda () (get-buffer "*forj-review*")) 30))
    (save-window-excursion
      (forj-permissions-test--keys (get-buffer "*forj-review*") "! RET C-c C-c"))
    (should (forj-chat-test--wait-idle))
    (should (file-exists-p (expand-file-name "src/b.py" root)))
    (let ((permissions (forj-permissions)))
      (unwind-protect
          (with-current-buffer permissions
            (should (forj-test--wait-for (lambda () (listp forj-permissions--grants)) 30))
            (let ((text (buffer-string)))
              (should (string-match-p "mode: ask  (the configured default)" text))
              (should (string-match-p "^  project +write_file(src/\\*\\*) +until revoked +no +g-" text)))
            ;; Another chat of the project: covered, no review.
            (let ((other (generate-new-buffer "*forj-permissions-test-other*")))
              (unwind-protect
                  (progn
                    (let ((run (forj-permissions-test--run
                                other root (list (list :id "w2" :name "write_file"
                                                       :args (list :path "src/c.py" :content "c\n"))))))
                      (should-not (car run))
                      (should (forj-test--wait-for (cdr run) 30))
                      (should (eq (plist-get (car (funcall (cdr run))) :ok) t)))
                    ;; Revoked from the list...
                    (with-current-buffer permissions
                      (goto-char (point-min))
                      (re-search-forward "^  project ")
                      (cl-letf (((symbol-function 'y-or-n-p) (lambda (&rest _) t)))
                        (call-interactively #'forj-permissions-revoke))
                      (should (forj-test--wait-for
                               (lambda () (and (listp forj-permissions--grants) (null forj-permissions--grants)))
                               30))
                      (should (string-match-p "(none: give one with s, m or ! in a review)" (buffer-string))))
                    ;; ...the call is reviewed again.
                    (let ((run (forj-permissions-test--run
                                other root (list (list :id "w3" :name "write_file"
                                                       :args (list :path "src/d.py" :content "d\n"))))))
                      (should (car run))
                      (save-window-excursion (forj-permissions-test--keys (car run) "q"))
                      (should (forj-test--wait-for (cdr run) 30))))
                (forj-permissions-test--kill-review)
                (kill-buffer other))))
        (kill-buffer permissions)))))

;;; On the wire

(defun forj-permissions-test--requests (log)
  "The request bodies the fake provider logged in LOG since it was last cleared, parsed."
  (with-temp-buffer
    (insert-file-contents log)
    ;; Only requests for a reply: not the questions about the window.
    (delq nil (mapcar (lambda (line)
                        (let ((request (json-parse-string line :object-type 'plist)))
                          (and (plist-get request :body)
                               (not (string-match-p (regexp-quote forj-window-user-agent) line))
                               (json-parse-string (plist-get request :body) :object-type 'plist))))
                      (split-string (buffer-string) "\n" t)))))

(defun forj-permissions-test--tool-names (body)
  "The names of the tools an OpenAI request BODY advertises."
  (mapcar (lambda (tool) (plist-get (plist-get tool :function) :name))
          (append (plist-get body :tools) nil)))

(defmacro forj-permissions-test-with-fake-chat (config &rest body)
  "Run BODY in a chat whose model is the local provider server, the worker's config CONFIG.
`root' is the project, `chat' the chat buffer, `log' the server's log."
  (declare (indent 1) (debug t))
  `(forj-test-with-project '(("a.txt" . "a\n"))
     (make-directory (expand-file-name ".git" root))
     (when ,config
       (with-temp-file (expand-file-name "config.toml" home) (insert ,config)))
     (let* ((port (forj-provider-test--server))
            (log forj-provider-test--log)
            (forj-providers (list (list "fake-openai" :family 'openai :model "fake-model"
                                        :url (format "http://127.0.0.1:%d/openai-text/v1" port)
                                        :local t :native-tools t)))
            (forj-provider "fake-openai")
            (chat (forj root)))
       (with-temp-file log)             ; only this test's requests
       (unwind-protect
           (with-current-buffer chat ,@body)
         (when (buffer-live-p chat)
           (with-current-buffer chat (set-buffer-modified-p nil))
           (kill-buffer chat))))))

(ert-deftest forj-test-permissions-read-only-chat-advertises-no-writing-tool ()
  "Switching a chat to read-only removes the writing tools from its next request, on the wire."
  (forj-permissions-test-with-fake-chat nil
    (forj-chat-test--say "Hello")
    (should (forj-chat-test--wait-idle))
    (let ((names (forj-permissions-test--tool-names (car (last (forj-permissions-test--requests log))))))
      (should (member "read_file" names))
      (should (member "write_file" names))
      (should (member "edit" names)))
    (forj-set-mode "read-only")
    (should (equal forj-tools-permission-mode "read-only"))
    (should (string-match-p "mode: read-only" (forj-chat--header-line)))
    (forj-chat-test--say "Look around")
    (should (forj-chat-test--wait-idle))
    (let* ((requests (forj-permissions-test--requests log))
           (names (forj-permissions-test--tool-names (car (last requests)))))
      (should (= (length requests) 2))
      (should (member "read_file" names))
      (should (member "search" names))
      (dolist (writer '("write_file" "edit" "edit_region" "multi_edit"))
        (should-not (member writer names))))
    ;; Back to ask: the writing tools come back.
    (forj-set-mode "ask")
    (forj-chat-test--say "Now fix it")
    (should (forj-chat-test--wait-idle))
    (should (member "write_file" (forj-permissions-test--tool-names
                                  (car (last (forj-permissions-test--requests log))))))))

(ert-deftest forj-test-permissions-worker-tools-disabled-advertises-none ()
  "`[tools] mode = \"disabled\"' in the worker's config: the chat advertises no tools."
  (forj-permissions-test-with-fake-chat "[tools]\nmode = \"disabled\"\n"
    ;; The chat's own option still says enabled: the stricter wins.
    (should (eq forj-chat-tools-mode 'enabled))
    (forj-chat-test--say "Hello")
    (should (forj-chat-test--wait-idle))
    (let ((body (car (last (forj-permissions-test--requests log)))))
      (should-not (plist-get body :tools))
      (should (string-match-p "Tools are disabled"
                              (plist-get (aref (plist-get body :messages) 0) :content))))
    (should (eq (forj-session-effective-tools-mode) 'disabled))
    (should (string-match-p "tools: disabled" (forj-chat--header-line)))))

(ert-deftest forj-test-permissions-mode-goes-with-each-plan ()
  "A read-only chat's plans carry its mode: a write is refused as not in the mode, never reviewed."
  (forj-chat-test-with-session '(("a.txt" . "a\n"))
      (list (list :text (forj-chat-test--block
                         "{\"id\": \"w1\", \"name\": \"write_file\", \"args\": {\"path\": \"b.txt\", \"content\": \"b\\n\"}}"))
            (list :text "I cannot write here."))
    (forj-set-mode "read-only")
    (forj-chat-test--say "Write b.txt")
    (should (forj-chat-test--wait-idle))
    (should-not (get-buffer "*forj-review*"))
    (should-not (file-exists-p (expand-file-name "b.txt" root)))
    (should (string-match-p "\"reason\":\"NotInMode\"" (forj-session-transcript)))))

;;; The turn's state from the worker

(defmacro forj-permissions-test-with-rules (rules replies &rest body)
  "Run BODY in a scripted chat replaying REPLIES, the user's config holding RULES."
  (declare (indent 2) (debug t))
  `(forj-test-with-project '(("a.txt" . "a\n"))
     (make-directory (expand-file-name ".git" root))
     (with-temp-file (expand-file-name "config.toml" home) (insert ,rules))
     (let* ((script (forj-chat-test--script ,replies))
            (forj-providers (list (list "test-script" :family 'scripted :script script)))
            (forj-provider "test-script")
            (forj-provider-scripted-delay 0.001)
            (chat (forj root)))
       (unwind-protect
           (with-current-buffer chat ,@body)
         (when (buffer-live-p chat)
           (with-current-buffer chat (set-buffer-modified-p nil))
           (kill-buffer chat))
         (delete-file script)))))

(defun forj-permissions-test--list-call (id)
  "A list_files block with ID."
  (forj-chat-test--block (format "{\"id\": \"%s\", \"name\": \"list_files\", \"args\": {\"directory\": \".\"}}" id)))

(ert-deftest forj-test-permissions-exit-loop-hands-back-to-the-user ()
  "After an exit_loop tool the loop stops: the model is not resumed, and the chat says why."
  (forj-permissions-test-with-rules "[[rules]]\ntype = \"exit_loop\"\ntool = \"list_files\"\n"
      (list (list :text (forj-permissions-test--list-call "l1"))
            (list :text "This reply must not be asked for."))
    (forj-chat-test--say "List the files")
    (should (forj-chat-test--wait-idle))
    (should (string-match-p "\"id\":\"l1\",\"name\":\"list_files\",\"ok\":true" (forj-session-transcript)))
    (should-not (string-match-p "must not be asked" (forj-session-transcript)))
    (should (string-match-p "list_files ended the tool loop (an exit_loop rule); your turn" (buffer-string)))))

(ert-deftest forj-test-permissions-continue-loop-iterations-do-not-count ()
  "Batches of continue_loop tools leave the iteration count alone."
  (let ((forj-chat-max-tool-iterations 1))
    (forj-permissions-test-with-rules "[[rules]]\ntype = \"continue_loop\"\ntool = \"list_files\"\n"
        (list (list :text (forj-permissions-test--list-call "l1"))
              (list :text (forj-permissions-test--list-call "l2"))
              (list :text (forj-chat-test--block "{\"id\": \"r1\", \"name\": \"read_file\", \"args\": {\"path\": \"a.txt\"}}"))
              (list :text "Done."))
      (forj-chat-test--say "Look")
      (should (forj-chat-test--wait-idle))
      (let ((transcript (forj-session-transcript)))
        ;; With a limit of one batch, the read still ran: the listings did not count.
        (should (string-match-p "\"id\":\"r1\",\"name\":\"read_file\",\"ok\":true" transcript))
        (should-not (string-match-p "Max tool iterations reached" transcript))
        (should (string-match-p "Done\\." transcript))))))

(ert-deftest forj-test-permissions-before-exit-tells-the-model ()
  "A turn ending while a required_before_exit tool has not run: the model is told, and goes on.
The instructions from hello are in the system prompt too."
  (forj-permissions-test-with-rules
      "[[rules]]\ntype = \"required_before_exit\"\ntools = [\"list_files\"]\n"
      (list (list :text (forj-chat-test--block "{\"id\": \"r1\", \"name\": \"read_file\", \"args\": {\"path\": \"a.txt\"}}"))
            (list :text "All done.")
            (list :text (forj-permissions-test--list-call "l1"))
            (list :text "Now really done."))
    (forj-chat-test--say "Read a.txt")
    (should (forj-chat-test--wait-idle))
    (let ((transcript (forj-session-transcript)))
      (should (string-match-p "## User\n\n(forj) Before you finish this turn, call list_files" transcript))
      (should (string-match-p "\"id\":\"l1\",\"name\":\"list_files\",\"ok\":true" transcript))
      (should (string-match-p "Now really done\\." transcript)))
    (should (string-match-p "## Rules of this project\n\n- .*list_files" (forj-session-system-prompt)))))

(provide 'forj-permissions-test)
;;; forj-permissions-test.el ends here
