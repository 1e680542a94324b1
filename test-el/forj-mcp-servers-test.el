;;; forj-mcp-servers-test.el --- Outside MCP servers in the menu and in the chat  -*- lexical-binding: t; -*-

;;; Commentary:

;; The user's config names a real MCP server (tests/mcp_probe_server.py,
;; built on the MCP SDK, speaking on stdio); the real worker starts it.
;; The menu's entry lists the server and its tools, and the model's call
;; to one of them goes through the chat's review before it runs.

;;; Code:

(require 'ert)
(require 'forj-chat-test)
(require 'forj-menu-test)
(require 'forj-mcp-servers)

(defconst forj-mcp-servers-test--probe
  (expand-file-name "../tests/mcp_probe_server.py"
                    (file-name-directory (or load-file-name buffer-file-name)))
  "The MCP server the tests configure.")

(defmacro forj-mcp-servers-test-with-chat (replies &rest body)
  "Run BODY in a chat whose user config names the probe server; the model replays REPLIES.
`root' is the project, `chat' the chat buffer, shown in the selected window."
  (declare (indent 1) (debug t))
  `(forj-test-with-project '(("a.txt" . "alpha\n"))
     (make-directory (expand-file-name ".git" root))
     (with-temp-file (getenv "FORJ_CONFIG")
       (insert (format "[mcp.servers.probe]\ncommand = [%S, %S]\n"
                       forj-test--python forj-mcp-servers-test--probe)))
     (let* ((script (forj-chat-test--script ,replies))
            (forj-providers (cons (list "test-script" :family 'scripted :script script)
                                  forj-providers))
            (forj-provider "test-script")
            (forj-provider-scripted-delay 0.001)
            (chat (forj root)))
       (unwind-protect
           (save-window-excursion
             (delete-other-windows)
             (switch-to-buffer chat)
             (forj-chat-test--ready-worker root)
             ,@body)
         (when (buffer-live-p chat)
           (with-current-buffer chat (set-buffer-modified-p nil))
           (kill-buffer chat))
         (dolist (name '("*forj-review*" "*forj-mcp-servers*"))
           (when (get-buffer name) (kill-buffer name)))
         (delete-file script)))))

(ert-deftest forj-test-mcp-servers-menu-lists-the-servers-and-their-tools ()
  "The menu's entry shows the configured server, its state and its tools."
  (forj-mcp-servers-test-with-chat (list (list :text "Hi."))
    (should (memq 'forj-mcp-servers (forj-menu-test--open)))
    (forj-menu-test--keys "p")
    (should (forj-test--wait-for
             (lambda () (with-current-buffer "*forj-mcp-servers*"
                          (string-match-p "mcp__probe__echo" (buffer-string))))
             60))
    (with-current-buffer "*forj-mcp-servers*"
      (should (string-match-p "^probe  running  (stdio: .*mcp_probe_server\\.py)"
                              (buffer-string)))
      (should (string-match-p "^  mcp__probe__touch$" (buffer-string))))))

(ert-deftest forj-test-mcp-servers-call-goes-through-the-chats-review ()
  "A model's call to a server's tool waits for review; approved, it runs and its result lands."
  (forj-mcp-servers-test-with-chat
      (list (list :text (forj-chat-test--block
                         "{\"id\": \"m1\", \"name\": \"mcp__probe__echo\", \"args\": {\"text\": \"hello from the chat\"}}"))
            (list :text "The server echoed it."))
    (with-current-buffer chat
      (forj-chat-test--say "Echo something.")
      (should (forj-test--wait-for (lambda () (get-buffer "*forj-review*")) 60))
      (with-current-buffer "*forj-review*"
        (let ((text (buffer-string)))
          (should (string-match-p "mcp__probe__echo" text))
          (should (string-match-p "MCP server probe" text))
          (should (string-match-p "hello from the chat" text)))
        (forj-review-approve-all)
        (forj-review-commit))
      (should (forj-chat-test--wait-idle 60))
      (should (string-match-p "✓ mcp__probe__echo" (buffer-string)))
      (should (string-match-p "\"content\":\\[\"hello from the chat\"\\]" (forj-session-transcript)))
      (should (string-match-p "## Assistant\n\nThe server echoed it." (buffer-string))))))

;; A cloned repository's .dir-locals.el (or any buffer-local value) must
;; not point the worker at a config file of the repository's, whose
;; [mcp.servers] would then count as the user's own.
(ert-deftest forj-test-mcp-servers-buffer-local-worker-arguments-cannot-add-a-server ()
  "A buffer-local `forj-worker-arguments' never reaches the worker; both are risky."
  (forj-test-with-project '(("README.md" . "# demo\n"))
    (let ((evil (expand-file-name "evil.toml" root))
          (marker (expand-file-name "the-repository-ran-a-program" root)))
      (with-temp-file evil
        (insert (format "[mcp.servers.evil]\ncommand = [%S, \"-c\", %S]\n"
                        forj-test--python
                        (format "open(%S, 'w').write('pwned')" marker))))
      (with-temp-buffer
        (setq-local forj-worker-arguments (list "--config" evil))
        (setq-local forj-worker-python "/nonexistent/python")
        (let* ((worker (forj-test--worker root))
               (config (plist-get (forj-worker-hello worker) :config)))
          (should-not (equal (plist-get config :user_file) evil))
          (should-not (plist-get (plist-get (plist-get config :effective) :mcp) :servers))))
      (sleep-for 1)
      (should-not (file-exists-p marker))))
  (dolist (option '(forj-worker-arguments forj-worker-python))
    (should (risky-local-variable-p option))
    (should-not (safe-local-variable-p option '("--config" "x")))))

(provide 'forj-mcp-servers-test)
;;; forj-mcp-servers-test.el ends here
