;;; forj-mcp-test.el --- MCP clients' calls reviewed in Emacs  -*- lexical-binding: t; -*-

;;; Commentary:

;; A real Emacs connected to the project's real worker; another agent is
;; played by mcp_client.py, a Python process driving `python -m forj_py
;; mcp' with the MCP SDK's own client.  The MCP server finds the worker
;; through its rendezvous file, and with `[mcp] review_in_emacs = true'
;; in the user's config the agent's edit is reviewed here, in a forj
;; review buffer naming the client: approved, it runs; denied with a
;; reason, the agent reads the reason.

;;; Code:

(require 'ert)
(require 'forj-epc-test)
(require 'forj-mcp)

(defconst forj-mcp-test--client
  (expand-file-name "mcp_client.py" (file-name-directory (or load-file-name buffer-file-name)))
  "The MCP client the tests start.")

(defun forj-mcp-test--start-agent (root path old new)
  "Start the MCP client on ROOT, asking to replace OLD by NEW in PATH.
Return a cons of its process and its output buffer."
  (let* ((out (generate-new-buffer " *forj-mcp-test agent*"))
         (process (make-process :name "forj-mcp-test agent"
                                :command (list forj-test--python forj-mcp-test--client
                                               (directory-file-name root) path old new)
                                :buffer out
                                :stderr (get-buffer-create " *forj-mcp-test agent stderr*")
                                :connection-type 'pipe
                                :noquery t)))
    (cons process out)))

(defun forj-mcp-test--review-buffer ()
  "The open review of an MCP client's call, or nil."
  (cl-find-if (lambda (b) (string-prefix-p "*forj-review: test-agent" (buffer-name b)))
              (buffer-list)))

(defun forj-mcp-test--agent-result (agent)
  "Wait for AGENT to finish; its JSON line as a plist."
  (forj-test--wait-for (lambda () (not (process-live-p (car agent)))) 60)
  (with-current-buffer (cdr agent)
    (goto-char (point-min))
    (json-parse-string (buffer-substring-no-properties (point-min) (line-end-position))
                       :object-type 'plist :false-object nil)))

(defmacro forj-mcp-test--with-agent-review (config &rest body)
  "Run BODY with `review' bound to the review buffer of the agent's edit.
CONFIG is the user's config file.  `agent' is the agent, `worker'
Emacs's worker for `root'."
  (declare (indent 1) (debug t))
  `(forj-test-with-project '(("src/main.py" . "line 1\nline 2\nline 3\n"))
     (with-temp-file (expand-file-name "config.toml" home)
       (insert ,config))
     (let* ((worker (forj-test--worker root))
            (chat (get-buffer-create "*forj-mcp-test chat*"))
            (chat-text "the user's chat\n")
            (agent (forj-mcp-test--start-agent root "src/main.py" "line 2\n" "line two\n"))
            (review nil))
       (with-current-buffer chat (insert chat-text))
       (unwind-protect
           (progn
             (should (forj-test--wait-for
                      (lambda () (setq review (forj-mcp-test--review-buffer))) 60))
             ,@body
             ;; No chat buffer was touched by the agent's review.
             (should (equal (with-current-buffer chat (buffer-string)) chat-text)))
         (when (process-live-p (car agent)) (delete-process (car agent)))
         (kill-buffer (cdr agent))
         (kill-buffer chat)
         (ignore worker)))))

(ert-deftest forj-test-fr-mcp-15-an-mcp-edit-approved-in-emacs-runs ()
  "The agent's edit is shown as a forj diff naming the client; approved, it runs."
  (forj-mcp-test--with-agent-review "[mcp]\nreview_in_emacs = true\n"
    (with-current-buffer review
      (should (string-match-p "MCP client test-agent" (format "%s" header-line-format)))
      (should (string-match-p "\\[MCP client test-agent 1.0\\]" (buffer-string)))
      (should (string-match-p "^.*-line 2" (buffer-string)))
      (should (string-match-p "^.*\\+line two" (buffer-string)))
      (let ((id (plist-get (car forj-review--items) :id)))
        (forj-review-decide id t)
        (forj-review-commit)))
    (let ((result (forj-mcp-test--agent-result agent)))
      (should-not (plist-get (plist-get result :read) :is_error))
      (should-not (plist-get (plist-get result :edit) :is_error))
      (should (equal (with-temp-buffer
                       (insert-file-contents (expand-file-name "src/main.py" root))
                       (buffer-string))
                     "line 1\nline two\nline 3\n")))))

(ert-deftest forj-test-fr-mcp-16-an-mcp-edit-denied-in-emacs-returns-the-reason ()
  "Denied with a reason in Emacs, the agent gets the refusal and the reason."
  (forj-mcp-test--with-agent-review "[mcp]\nreview_in_emacs = true\n"
    (with-current-buffer review
      (let ((id (plist-get (car forj-review--items) :id)))
        (forj-review-decide id (cons 'deny "keep the numbers as digits"))
        (forj-review-commit)))
    (let* ((result (forj-mcp-test--agent-result agent))
           (edit (plist-get result :edit)))
      (should (plist-get edit :is_error))
      (should (equal (plist-get (plist-get edit :body) :message)
                     "The user denied this call: keep the numbers as digits"))
      (should (equal (with-temp-buffer
                       (insert-file-contents (expand-file-name "src/main.py" root))
                       (buffer-string))
                     "line 1\nline 2\nline 3\n")))))

(ert-deftest forj-test-fr-mcp-17-an-mcp-edit-edited-in-emacs-writes-the-users-text ()
  "Edited before approval in Emacs, the user's text is written and the agent told."
  (forj-mcp-test--with-agent-review "[mcp]\nreview_in_emacs = true\n"
    (with-current-buffer review
      (let ((id (plist-get (car forj-review--items) :id)))
        (forj-review-modify id "src/main.py" "line 1\nline 2 (kept by the user)\nline 3\n")
        (forj-review-commit)))
    (let* ((result (forj-mcp-test--agent-result agent))
           (edit (plist-get result :edit)))
      (should-not (plist-get edit :is_error))
      (should (string-match-p "modified" (format "%S" (plist-get edit :body))))
      (should (equal (with-temp-buffer
                       (insert-file-contents (expand-file-name "src/main.py" root))
                       (buffer-string))
                     "line 1\nline 2 (kept by the user)\nline 3\n")))))

(ert-deftest forj-test-fr-mcp-18-an-unanswered-review-in-emacs-is-handed-back ()
  "A review nobody answers closes by itself; the agent is told why, nothing runs."
  (forj-mcp-test--with-agent-review "[mcp]\nreview_in_emacs = true\nreview_timeout_seconds = 2\n"
    (let* ((result (forj-mcp-test--agent-result agent))
           (edit (plist-get result :edit))
           (message (plist-get (plist-get edit :body) :message)))
      (should (plist-get edit :is_error))
      (should (string-prefix-p "Refused: this call needs the user's review and no reviewer"
                               message))
      (should (string-match-p "the review in Emacs went unanswered for 2 s" message))
      (should-not (buffer-live-p review))
      (should (equal (with-temp-buffer
                       (insert-file-contents (expand-file-name "src/main.py" root))
                       (buffer-string))
                     "line 1\nline 2\nline 3\n")))))

(provide 'forj-mcp-test)
;;; forj-mcp-test.el ends here
