;;; forj-chat.el --- The conversation buffer: the mode and the view  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The forj authors

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;; This program is distributed in the hope that it will be useful,
;; but WITHOUT ANY WARRANTY; without even the implied warranty of
;; MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE.  See the
;; GNU General Public License for more details.

;; You should have received a copy of the GNU General Public License
;; along with this program.  If not, see <https://www.gnu.org/licenses/>.

;;; Commentary:

;; `M-x forj' opens (or returns to) `*forj: PROJECT*', a conversation
;; with a language model about the current project.  This file is the
;; chat people see: the mode, its keys and commands, and the view.  What
;; the chat knows is its session (forj-session.el); the loop that sends,
;; streams, runs the batches and resumes the model is forj-loop.el, and
;; it tells this view what to draw (`forj-chat--view').
;;
;; The record is the session's list of entries (`forj-session-record'):
;; each holds its part of the conversation as a Markdown transcript,
;; divided by role headings:
;;
;;   ## User           what the user wrote
;;   ## Assistant      what the model wrote, tool-call blocks included
;;   ## Tool results   a header line per call and its tool-result block,
;;                     the worker's JSON exactly as it was journaled
;;
;; What the model reads on every turn is parsed from that transcript;
;; the buffer is a view of it.  The view draws results for people
;; (forj-render.el) and the model's tool calls as one readable line
;; each, their JSON folded away; `forj-show-raw-result' shows the JSON.
;; Everything above the input (a marker after the last `## User'
;; heading) is read-only; links and folds work there, and
;; `forj-edit-message' forks the conversation from an earlier message.
;; `C-c C-c' sends the input; `C-c C-m' (or `C-c ?') opens `forj-menu',
;; a menu of everything else.  Replies stream in above the prompt, so
;; the user can draft the next message meanwhile.  Lines starting with
;; "⚠ forj:" are notices for the user (errors, stops) and are not sent
;; to the model.
;;
;; `forj-continue' (`C-c C-j') lets the model go on after the iteration
;; limit, a cut or a failure; `forj-retry' (`C-c C-a') asks for the last
;; reply again, with another model after `forj-set-model' (or with a
;; prefix argument); `C-c C-k' stops the stream, a retry's wait, or the
;; batch, and does not resume.  `forj-chat-set-tools-mode' sets this
;; chat's tools mode (`forj-chat-tools-mode').
;;
;; `M-x forj-save' writes the transcript to a file; visiting that file
;; again (its first line names the project) reopens it as a chat, record
;; and view.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'forj)
(require 'forj-session)
(require 'forj-worker)
(require 'forj-tools)
(require 'forj-render)
(require 'imenu)
(require 'forj-provider)
(require 'forj-provider-openai)
(require 'forj-provider-anthropic)
(require 'forj-provider-gemini)
(require 'forj-provider-scripted)
(require 'forj-markdown)
(require 'forj-models)
(require 'forj-usage)
(require 'forj-context)
(require 'forj-compact)
(require 'forj-loop)
(require 'forj-history)
(require 'forj-recover)
(require 'forj-undo)

(autoload 'forj-menu "forj-menu" "Open the menu of everything forj can do from here." t)
(autoload 'forj-tasks "forj-tasks" "Show the project's todos and tasks in a side window." t)
(autoload 'forj-setup "forj-setup" "Set up a language model provider: a hosted one's API key, or a local server." t)
(autoload 'forj-set-mode "forj-permissions" "Set the permission mode of this chat." t)
(autoload 'forj-permissions "forj-permissions" "List the permissions in force, and revoke grants." t)
(autoload 'forj-audit "forj-audit" "List the tool calls journaled for a project." t)

;;; Options

(defcustom forj-chat-directory (locate-user-emacs-file "forj/chats/")
  "Where `forj-save' puts chats that have no file yet."
  :type 'directory
  :group 'forj)

(defun forj-chat-set-tools-mode (mode)
  "Set the tools mode of this chat to MODE, from the next request on.
MODE is `enabled', `parse-only' or `disabled', as for
`forj-chat-tools-mode'; it holds for this chat only."
  (interactive
   (list (intern (completing-read (format "Tools mode of this chat (now %s): " forj-chat-tools-mode)
                                  '("enabled" "parse-only" "disabled") nil t))))
  (unless (derived-mode-p 'forj-chat-mode) (user-error "Not in a forj chat"))
  (unless (memq mode '(enabled parse-only disabled))
    (user-error "Unknown tools mode `%s'; choose enabled, parse-only or disabled" mode))
  (setq-local forj-chat-tools-mode mode)
  (force-mode-line-update)
  (message "forj: tools mode of this chat: %s" mode))

(defface forj-chat-heading
  '((t :inherit font-lock-keyword-face :weight bold :height 1.1))
  "Face for the role headings of a chat."
  :group 'forj)

(defface forj-chat-notice
  '((t :inherit warning))
  "Face for forj's notices in a chat (not sent to the model)."
  :group 'forj)

;;; The view's state

(defvar-local forj-chat--out nil "Marker: where the turn's output goes.")
(defvar-local forj-chat--reply-start nil "Marker: the start of the reply being streamed.")
(defvar-local forj-chat--input nil
  "Marker: the start of the user's input.  Everything before it is history.")
(defvar-local forj-chat--reply-view nil
  "Marker: where the view of the reply being streamed starts.")
(defvar-local forj-chat--wait nil
  "A retry being waited for, or nil.
A plist (:at TIME :attempt N :message M :overlay O :timer T).")

;;; The mode

(defalias 'forj-chat--parent-mode
  (if (require 'markdown-mode nil t) 'gfm-mode 'text-mode)
  "The major mode chats build on: `gfm-mode' when installed.")

(defvar forj-chat-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "C-c C-c") #'forj-chat-send)
    (define-key map (kbd "C-c C-k") #'forj-chat-stop)
    (define-key map (kbd "C-c C-r") #'forj-tool-result)
    (define-key map (kbd "C-c C-o") #'forj-tools-toggle-fold)
    (define-key map (kbd "C-c C-j") #'forj-continue)
    (define-key map (kbd "C-c C-a") #'forj-retry)
    ;; In a terminal C-c C-m is C-c RET: both open the menu.
    (define-key map (kbd "C-c C-m") #'forj-menu)
    (define-key map (kbd "C-c ?") #'forj-menu)
    (define-key map (kbd "C-c C-v") #'forj-tasks)
    ;; `text-mode' gives M-TAB to `ispell-complete-word': here it
    ;; completes an @file (C-M-i is the same key in a terminal).
    (define-key map (kbd "C-M-i") #'completion-at-point)
    map)
  "Keymap of `forj-chat-mode'.")

(defvar forj-chat-documented-keymaps
  '(("In the chat" . forj-chat-mode-map))
  "The keymaps whose keys `describe-mode' lists in a chat, with a title each.
Each element is (TITLE . KEYMAP-VARIABLE); a variable not yet bound is
skipped.")

;;;###autoload
(define-derived-mode forj-chat-mode forj-chat--parent-mode "forj"
  "A conversation with a language model about a project.
\\<forj-chat-mode-map>
Type below the last \"## User\" heading and send with \\[forj-chat-send].
\\[forj-chat-stop] stops the reply or the running tools, and
\\[forj-menu] opens a menu of everything else.

\\{forj-chat-mode-map}"
  ;; Started again, the mode keeps the chat's id and record only.
  (setq forj-session (forj-session-renew forj-session))
  (setf (forj-session-view-function forj-session) #'forj-chat--view)
  (font-lock-add-keywords nil `((,forj-session-heading-re 0 'forj-chat-heading t)
                                (,(concat "^" forj-session-notice-prefix ".*$") 0 'forj-chat-notice t)))
  (unless (derived-mode-p 'markdown-mode) (forj-markdown-setup))
  (setq-local header-line-format
              ;; A `%' in an :eval's text would start a mode-line construct.
              '(:eval (string-replace "%" "%%" (forj-chat--header-line))))
  (add-hook 'completion-at-point-functions #'forj-context-complete-at-point nil t)
  (add-hook 'completion-at-point-functions #'forj-commands-complete-at-point nil t)
  (forj-chat--setup-view)
  (forj-chat--read-metadata))

;;;###autoload
(add-to-list 'magic-mode-alist '("<!-- forj-chat " . forj-chat-mode))

(defun forj-chat--bindings (map prefix)
  "The command bindings of MAP (not of its parents) as (KEYS . COMMAND) pairs.
PREFIX, a vector, is the key sequence leading to MAP."
  (let ((found nil))
    ;; A keymap lists its latest bindings first: reversed, they come in
    ;; the order they were defined.
    (map-keymap-internal
     (lambda (event binding)
       (let ((keys (vconcat prefix (vector event))))
         (cond ((keymapp binding)
                (setq found (append (forj-chat--bindings
                                     (if (symbolp binding) (symbol-function binding) binding)
                                     keys)
                                    found)))
               ((and (symbolp binding) (commandp binding))
                (push (cons keys binding) found)))))
     map)
    found))

(defun forj-chat--command-summary (command)
  "The first line of COMMAND's docstring, or a note that it has none yet."
  (let ((doc (ignore-errors (documentation command t))))
    (cond ((not (fboundp command)) (format "`%s' (not loaded yet)" command))
          ((and doc (not (string-empty-p doc))) (car (split-string doc "\n")))
          (t (format "`%s'" command)))))

(defun forj-chat--mode-documentation ()
  "The documentation of `forj-chat-mode': its docstring's start, and every key.
Each key of `forj-chat-documented-keymaps' is listed with the first
line of its command's docstring."
  ;; The function's own docstring: the symbol's documentation is this.
  (let ((intro (car (split-string (or (documentation (symbol-function 'forj-chat-mode) t) "")
                                  "\n\\\\{" t))))
    (concat
     (string-trim-right (or intro ""))
     "\n"
     (mapconcat
      (lambda (entry)
        (let ((map (and (boundp (cdr entry)) (symbol-value (cdr entry)))))
          (if (not (keymapp map))
              ""
            (concat "\n" (car entry) ":\n\n"
                    (mapconcat (lambda (binding)
                                 (format "%-10s `%s': %s"
                                         (key-description (car binding))
                                         (cdr binding)
                                         (forj-chat--command-summary (cdr binding))))
                               (forj-chat--bindings map [])
                               "\n")
                    "\n"))))
      forj-chat-documented-keymaps "")
     "\n\\<forj-chat-mode-map>The menu (\\[forj-menu]) shows the rest; \\[customize-group] forj lists the settings.")))

;; `describe-mode' (C-h m) and `describe-function' show every key of the
;; chat with what it does, from the keymaps as they are now.
(put 'forj-chat-mode 'function-documentation '(forj-chat--mode-documentation))

;;; The header line

(defun forj-chat--header-line ()
  "The header line: the state first, then provider and model, the modes, usage.
The state is what the chat does (receiving, running tools, your turn)
and, while a turn runs, its tool batches against the limit; then the
context use and cost (`forj-compact-header') and how commands run.
The text is as shown: `header-line-format' escapes its `%'."
  (let ((state (forj-session-state forj-session))
        (iterations (forj-session-iterations forj-session))
        (tools (forj-session-effective-tools-mode)))
    (format " %s%s · forj · %s %s · mode: %s%s · %s · %s"
            (pcase state
              ((guard forj-chat--wait) (forj-chat--wait-text))
              ('streaming "receiving…")
              ('tools "running tools…")
              (_ (substitute-command-keys "your turn (\\<forj-chat-mode-map>\\[forj-chat-send] sends)")))
            (cond ((or (eq state 'idle) (zerop iterations)) "")
                  ((forj-session-unbounded forj-session) (format " · batch %d (to the end)" iterations))
                  (t (format " · batch %d/%d" iterations (forj-loop-max-iterations))))
            (or (plist-get (forj-session-provider forj-session) :name) "no provider")
            (or (plist-get (forj-session-provider forj-session) :model) "")
            (forj-session-permission-mode)
            (if (eq tools 'enabled) "" (format " · tools: %s" tools))
            (forj-compact-header)
            (if (forj-session-root forj-session)
                (forj-worker-sandbox-description (forj-worker-get (forj-session-root forj-session)))
              "commands: no project"))))

;;; The project

(defun forj-chat--metadata-line (root)
  "The first line of a chat about ROOT."
  (format "<!-- forj-chat root: %s -->\n" (abbreviate-file-name root)))

(defun forj-chat--read-metadata ()
  "Take the project root from the chat's first line, if it names one."
  (save-excursion
    (goto-char (point-min))
    (when (looking-at "<!-- forj-chat root: \\(.*?\\) -->")
      (let* ((named (match-string-no-properties 1))
             ;; A remote root is taken as written, never looked at now:
             ;; opening a chat file (one downloaded, one in a repository)
             ;; must not make TRAMP connect to the host or sudo it names.
             ;; Its worker starts only after the user confirms the root.
             (root (if (file-remote-p named)
                       (and (string-prefix-p "/" (file-remote-p named 'localname)) named)
                     (expand-file-name named))))
        (when (and root (or (file-remote-p root) (file-directory-p root)))
          (setf (forj-session-root forj-session) (file-name-as-directory root)
                forj-tools-root (forj-session-root forj-session)
                ;; A chat file from elsewhere (a download, a repository) only
                ;; names a root; the user confirms it before the first send.
                (forj-session-root-confirmed forj-session)
                (and buffer-file-name
                     (file-in-directory-p buffer-file-name forj-chat-directory)))
          (forj-tools-keep-worker t))))))

;;; Entry points

;;;###autoload
(defun forj (&optional directory)
  "Open the chat about the project of DIRECTORY (default: the current one).
An existing chat of the project is shown again."
  (interactive)
  (let* ((root (forj-worker-project-root directory))
         (name (format "*forj: %s*" (file-name-nondirectory (directory-file-name root))))
         (existing (cl-find-if (lambda (b)
                                 (and (eq (buffer-local-value 'major-mode b) 'forj-chat-mode)
                                      (equal (forj-session-root (buffer-local-value 'forj-session b)) root)))
                               (buffer-list))))
    (pop-to-buffer-same-window
     (or existing
         (let ((buffer (generate-new-buffer name)))
           (with-current-buffer buffer
             (insert (forj-chat--metadata-line root))
             (forj-chat-mode)
             ;; C-x C-f and friends start in the project.
             (setq default-directory root)
             (setf (forj-session-root forj-session) root
                   (forj-session-root-confirmed forj-session) t
                   forj-tools-root root)
             (forj-tools-keep-worker t)
             (setf (forj-session-provider forj-session) (forj-session-choose-provider)))
           buffer)))
    (goto-char (point-max))
    (forj-worker-offer-install root #'forj-loop-start-worker)
    (current-buffer)))

(defconst forj-chat--demo-directory
  (expand-file-name "demo/" (file-name-directory
                             (directory-file-name (file-name-directory
                                                   (or load-file-name buffer-file-name)))))
  "The demo's files in the forj checkout.")

;;;###autoload
(defun forj-demo ()
  "Open a chat with the scripted provider on a fresh copy of the sample project.
The recorded session reads the project, proposes an edit (you review
its diff) and answers; no key and no network are needed."
  (interactive)
  (let ((dir (file-name-as-directory (make-temp-file "forj-demo-" t))))
    (copy-directory (expand-file-name "project" forj-chat--demo-directory) dir nil nil t)
    (if (eq 0 (ignore-errors (call-process "git" nil nil nil "-C" dir "init" "-q")))
        ;; Committed, so the review sees tracked files (no "untracked" warning).
        (ignore-errors
          (call-process "git" nil nil nil "-C" dir "add" "-A")
          (call-process "git" nil nil nil "-C" dir "-c" "user.name=forj demo"
                        "-c" "user.email=demo@forj.invalid" "-c" "commit.gpgsign=false"
                        "commit" "-q" "-m" "The sample project"))
      ;; project.el finds a root by its .git; an empty one is enough.
      (make-directory (expand-file-name ".git" dir) t))
    (let ((forj-provider "scripted"))
      (with-current-buffer (forj dir)
        (forj-session-notice
         (format "demo: a copy of the sample project in %s, and a recorded model session.  Type anything and press C-c C-c." dir))
        (current-buffer)))))

;;;###autoload
(defun forj-run (&optional directory)
  "Open the chat on DIRECTORY in the only window, for `make run'.
With no provider set up, the chat's first lines offer `forj-setup'
and `forj-demo', as buttons."
  (prog1 (forj directory)
    (delete-other-windows)))

(defun forj-chat-open-session (session &optional setup)
  "Open a chat buffer on SESSION, a saved chat's, ready to go on; return it.
SETUP, if given, is called in the buffer before the chat is drawn.  A
SESSION with no provider gets the one `forj-session-choose-provider'
picks."
  (let ((root (forj-session-root session))
        (provider (forj-session-provider session)))
    (with-current-buffer (generate-new-buffer
                          (format "*forj: %s*" (file-name-nondirectory (directory-file-name root))))
      (insert (forj-session-transcript (forj-session-record session)))
      (let ((forj-chat-record-changed-hook nil))
        (forj-chat-mode))
      (setf (forj-session-provider session) nil
            (forj-session-view-function session) #'forj-chat--view)
      (setq forj-session session
            forj-tools-root root
            default-directory root)
      (when setup (funcall setup))
      (forj-tools-keep-worker t)
      (forj-chat--redraw "")
      (set-buffer-modified-p nil)
      (setf (forj-session-provider session) (or provider (forj-session-choose-provider)))
      (goto-char (point-max))
      (forj-loop-start-worker)
      (current-buffer))))

;;; Notices

(defconst forj-chat--notice-commands
  '(forj-setup forj-demo forj-continue forj-continue-to-end forj-set-iteration-limit
               forj-retry forj-set-model forj-worker-log)
  "Commands a notice may offer as a button, by naming them after \\[execute-extended-command].
Only these: a notice can carry text from a project's configuration.")

(defun forj-chat--notice-buttons (beg end)
  "Make buttons of the commands named between BEG and END after \\[execute-extended-command].
Only the commands of `forj-chat--notice-commands'."
  (save-excursion
    (goto-char beg)
    (while (re-search-forward "M-x \\(forj-[a-z-]+\\)" end t)
      (let ((command (intern-soft (match-string-no-properties 1))))
        (when (memq command forj-chat--notice-commands)
          (make-text-button (match-beginning 0) (match-end 0)
                            'action (lambda (_button) (call-interactively command))
                            'help-echo (format "Run %s" command)
                            'follow-link t))))))

;;; Sending, continuing, retrying, stopping

(defun forj-chat--input-text ()
  "The text the user typed after the input marker."
  (buffer-substring-no-properties forj-chat--input (point-max)))

(defun forj-chat-send ()
  "Send the text after the last \"## User\" heading to the model."
  (interactive)
  (unless (derived-mode-p 'forj-chat-mode) (user-error "Not in a forj chat"))
  (unless (eq (forj-session-state forj-session) 'idle)
    (user-error (substitute-command-keys
                 "A reply is still under way; \\<forj-chat-mode-map>\\[forj-chat-stop] stops it (your text is kept)")))
  (let ((typed (forj-chat--input-text)))
    (when (string-empty-p (forj-session-text-of typed))
      (user-error "Type your message below the last \"## User\" heading"))
    (forj-loop-send typed)
    (goto-char (point-max))))

(defun forj-continue (&optional to-end)
  "Let the model go on where it stopped.
After the iteration limit, the model gets as many tool batches again;
after a reply the token limit cut, it is asked to go on from the cut;
after a failed or stopped reply, it is asked again.  Your draft in the
input stays.  With a prefix argument TO-END, the model may run tools
until it is done with this turn (`forj-continue-to-end')."
  (interactive "P")
  (unless (derived-mode-p 'forj-chat-mode) (user-error "Not in a forj chat"))
  (unless (eq (forj-session-state forj-session) 'idle)
    (user-error "A reply is still under way"))
  (unless (forj-session-continuation forj-session)
    (user-error "Nothing stopped early here; type your next message"))
  (forj-loop-continue (and to-end t)))

(defun forj-continue-to-end ()
  "Let the model go on where it stopped, with tools until it is done with the turn."
  (interactive)
  (forj-continue t))

(defun forj-set-iteration-limit (limit)
  "Let each of your messages in this chat lead to LIMIT tool batches.
A LIMIT of 0 goes back to the default (`forj-chat-max-tool-iterations'
or the worker's configuration)."
  (interactive (list (read-number (format "Tool batches per message in this chat (now %d; 0: default): "
                                          (forj-loop-max-iterations))
                                  (forj-loop-max-iterations))))
  (unless (derived-mode-p 'forj-chat-mode) (user-error "Not in a forj chat"))
  (unless (natnump limit) (user-error "The limit is a number of batches, 0 or more"))
  (forj-loop-set-limit (and (> limit 0) limit))
  (message "forj: %d tool batches per message in this chat" (forj-loop-max-iterations)))

(defun forj-retry (&optional other-model)
  "Ask the model for its last reply again; OTHER-MODEL: choose the model first.
The last reply and what followed it (its tool results, notices) leave
the chat, and the model answers again from there.  Files its tool
calls changed stay as they are.  Interactively, OTHER-MODEL is the
prefix argument."
  (interactive "P")
  (unless (derived-mode-p 'forj-chat-mode) (user-error "Not in a forj chat"))
  (unless (eq (forj-session-state forj-session) 'idle)
    (user-error "A reply is still under way; stop it first"))
  (unless (forj-loop-retry-index)
    (user-error "There is no reply to retry yet"))
  (when other-model (call-interactively #'forj-set-model))
  (forj-loop-retry))

(defun forj-chat-stop ()
  "Stop the reply being streamed or the tools running; do not resume."
  (interactive)
  (if forj-session
      (forj-loop-stop)
    (message "forj: nothing to stop")))

;;;###autoload
(defun forj-compact ()
  "Summarise this chat's conversation into one message now.
The model writes the summary; from then on it reads the summary and
what follows.  The chat and its saved file keep the whole history."
  (interactive)
  (unless (derived-mode-p 'forj-chat-mode) (user-error "Not in a forj chat"))
  (unless (eq (forj-session-state forj-session) 'idle)
    (user-error "A reply is still under way; compact when it is done"))
  (unless (forj-session-provider forj-session) (user-error "This chat has no provider"))
  (forj-loop-compact))

;;; Drawing a turn

(defun forj-chat--insert-out (text)
  "Insert TEXT in the view at the output marker, as history.
The user's point stays where it is."
  (let ((inhibit-read-only t))
    (save-excursion
      (goto-char forj-chat--out)
      (let ((from (point)))
        (insert text)
        (forj-chat--seal from (point))))))

(defvar-local forj-chat--results-view nil
  "Marker: where the view of the tool results being drawn starts.")

(defun forj-chat--results-heading ()
  "Start the \"## Tool results\" section in the view."
  (setq forj-chat--results-view (copy-marker forj-chat--out))
  (forj-chat--insert-out "\n")
  (forj-chat--insert-out (forj-chat--heading "## Tool results"))
  (forj-chat--insert-out "\n\n"))

(defun forj-chat--results-end (entry)
  "Tie the view of the results section to the record's ENTRY."
  (when (markerp forj-chat--results-view)
    (with-silent-modifications
      (put-text-property forj-chat--results-view forj-chat--out 'forj-entry entry))
    (set-marker forj-chat--results-view nil))
  (setq forj-chat--results-view nil))

(defun forj-chat--results-discard ()
  "Take the view of the results section away: it is not recorded."
  (let ((inhibit-read-only t))
    (when (markerp forj-chat--results-view)
      (delete-region forj-chat--results-view forj-chat--out)
      (set-marker forj-chat--results-view nil)))
  (setq forj-chat--results-view nil))

(defun forj-chat--reply-start ()
  "Draw the heading of a reply about to stream."
  (setq forj-chat--reply-view (copy-marker forj-chat--out))
  (forj-chat--insert-out (forj-chat--heading "## Assistant"))
  (forj-chat--insert-out "\n\n")
  (setq forj-chat--reply-start (copy-marker forj-chat--out)))

(defun forj-chat--reply-end (entry)
  "Draw the reply just streamed as the record's ENTRY, for reading."
  (forj-chat--clear-wait)
  (let ((inhibit-read-only t))
    (delete-region forj-chat--reply-view forj-chat--out))
  (forj-chat--view-entry entry)
  (set-marker forj-chat--reply-view nil)
  (set-marker forj-chat--reply-start nil)
  (setq forj-chat--reply-view nil
        forj-chat--reply-start nil))

(defun forj-chat--set-input (text)
  "Put TEXT in the input instead of its draft, with point after it."
  (let ((inhibit-read-only t))
    (delete-region forj-chat--input (point-max))
    (goto-char (point-max))
    (insert text)))

(defun forj-chat--user-message (entry draft)
  "Draw the user's message ENTRY, then a fresh prompt holding DRAFT."
  (let ((inhibit-read-only t))
    (delete-region forj-chat--out (point-max)))
  (forj-chat--view-entry entry)
  (forj-chat--insert-prompt draft))

(defun forj-chat--view (event &rest args)
  "Draw EVENT, with ARGS, as the session told it.
The chat's view function (see `forj-session-view')."
  (pcase event
    ('entry (forj-chat--view-entry (car args)))
    ('user-message (apply #'forj-chat--user-message args))
    ('redraw (forj-chat--redraw (or (car args) (forj-chat--input-text))))
    ('draft (forj-chat--input-text))
    ('set-draft (forj-chat--set-input (car args)))
    ('input forj-chat--input)
    ('reply-start (forj-chat--reply-start))
    ('reply-text (when forj-chat--reply-start (forj-chat--insert-out (car args))))
    ('reply-end (forj-chat--reply-end (car args)))
    ('wait (apply #'forj-chat--waiting args))
    ('wait-over (forj-chat--clear-wait))
    ('results-start (forj-chat--results-heading))
    ('output forj-chat--out)
    ('output-to (set-marker forj-chat--out (car args)))
    ('insert (forj-chat--insert-out (car args)))
    ('results-end (forj-chat--results-end (car args)))
    ('results-discard (forj-chat--results-discard))
    ('context (forj-chat--draw-context))
    ('turn-end (setq forj-chat--reply-start nil)
               (forj-chat--clear-wait))))

;;; Waiting to retry

(defun forj-chat--waiting (seconds attempt message)
  "Show the countdown to retry ATTEMPT, in SECONDS, after the provider's MESSAGE.
It shows above the reply and in the header line."
  (forj-chat--clear-wait)
  (let ((overlay (make-overlay forj-chat--reply-start forj-chat--reply-start))
        (buffer (current-buffer)))
    (setq forj-chat--wait (list :at (+ (float-time) seconds) :attempt attempt :message message
                                :overlay overlay))
    (plist-put forj-chat--wait :timer
               (run-at-time 1 1 (lambda ()
                                  (when (buffer-live-p buffer)
                                    (with-current-buffer buffer (forj-chat--show-wait))))))
    (forj-chat--show-wait)))

(defun forj-chat--wait-text ()
  "The countdown of the retry being waited for."
  (let ((left (max 0 (ceiling (- (plist-get forj-chat--wait :at) (float-time))))))
    (substitute-command-keys
     (format "retry %d of %d in %d s…  \\<forj-chat-mode-map>\\[forj-chat-stop] stops"
             (plist-get forj-chat--wait :attempt) forj-provider-retries left))))

(defun forj-chat--show-wait ()
  "Show the countdown of the retry being waited for."
  (when forj-chat--wait
    (overlay-put (plist-get forj-chat--wait :overlay) 'before-string
                 (propertize (format "⏳ %s: %s\n" (plist-get forj-chat--wait :message) (forj-chat--wait-text))
                             'face 'forj-chat-notice))
    (force-mode-line-update)))

(defun forj-chat--clear-wait ()
  "Take the countdown of a retry away: it was sent, or the turn ended."
  (when forj-chat--wait
    (let ((timer (plist-get forj-chat--wait :timer)))
      (when (timerp timer) (cancel-timer timer)))
    (delete-overlay (plist-get forj-chat--wait :overlay))
    (setq forj-chat--wait nil)
    (force-mode-line-update)))

;;; The view

(defun forj-chat--heading (text)
  "TEXT as a role heading of the view."
  (propertize text 'face 'forj-chat-heading 'font-lock-face 'forj-chat-heading
              'forj-heading t 'forj-rendered t))

(defun forj-chat--setup-view ()
  "Make the buffer a view of its record: read the text as a transcript, draw it."
  (setq-local forj-tools-result-style 'rendered)
  (setq-local forj-tools-after-render-function #'forj-chat--seal)
  (unless (eq font-lock-fontify-region-function #'forj-chat--fontify-region)
    (setq-local forj-chat--fontify-original font-lock-fontify-region-function)
    (setq-local font-lock-fontify-region-function #'forj-chat--fontify-region))
  (unless (eq font-lock-unfontify-region-function #'forj-chat--unfontify-region)
    (setq-local forj-chat--unfontify-original font-lock-unfontify-region-function)
    (setq-local font-lock-unfontify-region-function #'forj-chat--unfontify-region))
  (setq-local imenu-create-index-function #'forj-chat--imenu-index)
  (setq-local outline-regexp (substring forj-session-heading-re 1))
  (setq-local outline-level #'forj-chat--outline-level)
  (setq-local revert-buffer-function #'forj-chat--revert)
  (add-hook 'write-contents-functions #'forj-chat--write nil t)
  ;; An auto-save file would hold the view, not the transcript.
  (when buffer-file-name (auto-save-mode -1))
  (forj-chat--load))

(defvar-local forj-chat--fontify-original nil
  "The font-lock function that fontifies what forj did not draw itself.")
(defvar-local forj-chat--unfontify-original nil
  "The font-lock function that unfontifies what forj did not draw itself.")

(defun forj-chat--each-unrendered (beg end function)
  "Call FUNCTION with the bounds of each piece of BEG..END forj did not draw."
  (let ((pos beg))
    (while (< pos end)
      (let ((next (next-single-property-change pos 'forj-rendered nil end)))
        (unless (get-text-property pos 'forj-rendered) (funcall function pos next))
        (setq pos next)))))

(defun forj-chat--fontify-region (beg end &optional loudly)
  "Fontify BEG..END except what forj drew (its faces are its own); LOUDLY as usual."
  (forj-chat--each-unrendered
   beg end (lambda (from to) (funcall (or forj-chat--fontify-original #'font-lock-default-fontify-region)
                                      from to loudly)))
  `(jit-lock-bounds ,beg . ,end))

(defun forj-chat--unfontify-region (beg end)
  "Unfontify BEG..END except what forj drew."
  (forj-chat--each-unrendered
   beg end (lambda (from to) (funcall (or forj-chat--unfontify-original #'font-lock-default-unfontify-region)
                                      from to))))

(defun forj-chat--load ()
  "Take the buffer's text as a transcript: make it the record and draw the view.
A chat drawn already (the mode started again) is drawn again from its record."
  (let ((modified (buffer-modified-p)))
    (if (and (forj-session-record forj-session) (markerp forj-chat--input)
             (eq (marker-buffer forj-chat--input) (current-buffer)))
        (forj-chat--redraw (forj-chat--input-text))
      (let ((parsed (forj-session-split (buffer-substring-no-properties (point-min) (point-max)))))
        (setf (forj-session-record forj-session) (car parsed))
        (forj-chat--redraw (cdr parsed))))
    (set-buffer-modified-p modified)
    (buffer-disable-undo)
    (buffer-enable-undo)))

(put 'forj-chat--input 'permanent-local t)

(defun forj-chat--redraw (draft)
  "Draw the whole view from the record, with DRAFT in the input.
Each window on the chat keeps showing what it showed (a retry cuts
only the end), and point in the input stays in the input."
  (let* ((inhibit-read-only t)
         (input (and (markerp forj-chat--input) (marker-position forj-chat--input)))
         (here (point))
         (in-input (and input (>= here input)))
         (views (mapcar (lambda (window) (list window (window-start window) (window-point window)))
                        (get-buffer-window-list (current-buffer) nil t))))
    (remove-overlays)
    (erase-buffer)
    (if (markerp forj-chat--out)
        (set-marker forj-chat--out (point-min))
      (setq forj-chat--out (copy-marker (point-min) t)))
    (dolist (entry (forj-session-record forj-session)) (forj-chat--view-entry entry))
    (forj-chat--insert-prompt draft)
    (forj-chat--draw-context)
    (goto-char (if in-input
                   (min (point-max) (+ forj-chat--input (- here input)))
                 (min here (point-max))))
    (dolist (view views)
      (pcase-let ((`(,window ,start ,at) view))
        (set-window-start window (min start (point-max)) t)
        (set-window-point window (if (and in-input (eq window (selected-window)))
                                     (point)
                                   (min at (point-max))))))))

(defun forj-chat--insert-prompt (draft)
  "Draw the prompt heading after the history, then DRAFT as the input."
  (let ((inhibit-read-only t)
        (at (marker-position forj-chat--out)))
    (save-excursion
      (goto-char at)
      (insert "\n" (forj-chat--heading "## User") "\n\n")
      (forj-chat--seal at (point))
      (set-marker forj-chat--out at)
      (if (markerp forj-chat--input)
          (set-marker forj-chat--input (point))
        (setq forj-chat--input (copy-marker (point))))
      (insert draft))))

(defun forj-chat--view-entry (entry)
  "Draw the record's ENTRY at the output marker, as history."
  (let ((inhibit-read-only t))
    (save-excursion
      (goto-char forj-chat--out)
      (let ((from (point)))
        (pcase (plist-get entry :role)
          ("assistant" (forj-chat--draw-reply (plist-get entry :text)))
          ("tool" (forj-chat--draw-results entry))
          (_ (insert (plist-get entry :text))
             (forj-chat--mark-lines from (point))))
        (put-text-property from (point) 'forj-entry entry)
        (forj-chat--seal from (point))))))

(defun forj-chat--mark-lines (from to)
  "Give the headings and notices between FROM and TO their faces."
  (save-excursion
    (goto-char from)
    (while (re-search-forward (concat forj-session-heading-re "\\|^" forj-session-notice-prefix ".*$") to t)
      (add-text-properties (match-beginning 0) (match-end 0)
                           (if (eq (char-after (match-beginning 0)) ?#)
                               (list 'face 'forj-chat-heading 'forj-heading t 'forj-rendered t)
                             (list 'face 'forj-chat-notice 'forj-rendered t)))
      (unless (eq (char-after (match-beginning 0)) ?#)
        (forj-chat--notice-buttons (match-beginning 0) (match-end 0))))))

(defun forj-chat--draw-reply (text)
  "Draw the assistant entry TEXT: its prose, each tool call as one line."
  (pcase-let ((`(,heading . ,reply) (forj-session-split-heading text)))
    (when heading (insert (forj-chat--heading heading) "\n"))
    (let ((start (point)))
      (insert reply)
      (let ((calls (save-restriction
                     (narrow-to-region start (point))
                     (forj-tools-parse-region (point-min) (point-max)))))
        ;; From the last, so positions before stay valid.
        (dolist (call (reverse calls))
          (forj-chat--fold-call call)))
      (forj-chat--mark-lines start (point)))))

(defun forj-chat--fold-call (entry)
  "Show the tool-call block of the parsed ENTRY as one line, its JSON folded away."
  (let* ((beg (plist-get entry :beg))
         (end (min (plist-get entry :end) (point-max)))
         (call (plist-get entry :call))
         (raw (save-excursion
                (goto-char beg)
                (string-trim-right (buffer-substring-no-properties (line-beginning-position 2) end)
                                   "[`~ \t\n]*")))
         (line (if call
                   (forj-render-call-line call)
                 (propertize (format "→ a tool call forj cannot read (%s)" (plist-get entry :error))
                             'face 'forj-render-failed))))
    (save-excursion
      (goto-char beg)
      (insert (forj-render-one-line line) "\n")
      (let* ((block-start (point))
             (fold (make-overlay block-start (+ block-start (- end beg)) nil t nil)))
        (overlay-put fold 'invisible t)
        (overlay-put fold 'evaporate t)
        (overlay-put fold 'forj-render-fold t)
        (add-text-properties beg (+ block-start (- end beg))
                             (list 'forj-raw raw 'forj-raw-kind "call"
                                   'forj-render-fold-overlay fold 'forj-rendered t))))))

(defun forj-chat--result-blocks ()
  "The tool-result blocks of this buffer, each as (TEXT . MS).
MS is how long the call took, as the block's header line says, or nil."
  (let ((blocks (forj-session-blocks (point-min) (point-max) "tool-result"))
        (times nil))
    (goto-char (point-min))
    (while (re-search-forward "^```tool-result[ \t]*$" nil t)
      (push (forj-tools-header-took
             (save-excursion (forward-line -1)
                             (buffer-substring-no-properties (point) (line-end-position))))
            times))
    (cl-mapcar #'cons blocks (nreverse times))))

(defun forj-chat--draw-results (entry)
  "Draw the tool results ENTRY: each result's header and body, for reading."
  (pcase-let ((`(,heading . ,rest) (forj-session-split-heading (plist-get entry :text))))
    (insert "\n")
    (when heading (insert (forj-chat--heading heading) "\n\n"))
    (let ((calls (forj-session-calls-before entry))
          (root (forj-session-root forj-session)))
      (with-temp-buffer
        (insert rest)
        ;; Each block with the time its header line records.
        (setq rest (forj-chat--result-blocks)))
      (pcase-dolist (`(,block . ,took) rest)
        (let* ((result (ignore-errors (forj-tools-json-decode block)))
               (result (and (listp result) (keywordp (car-safe result)) result)))
          (if result
              (forj-tools-insert-result (cdr (assoc (plist-get result :id) calls)) result
                                        'done took nil root)
            (insert (string-trim block) "\n"))))
      (insert "\n"))))

;;; The context list

(defun forj-chat--insert-context ()
  "Insert the context list as it is drawn at the top of the chat."
  (let ((bytes (forj-context-bytes)))
    (insert (propertize (format "Context, sent with every request: %d item%s, %s bytes, ≈%s tokens"
                                (length forj-context-items)
                                (if (= 1 (length forj-context-items)) "" "s")
                                bytes (forj-usage-format-tokens (forj-usage-tokens-of-bytes bytes)))
                        'face 'forj-context-heading)
            "\n")
    (dolist (item forj-context-items)
      (let ((title (plist-get item :title)))
        (insert "  ")
        (let ((from (point)))
          (insert "[remove]")
          (make-text-button from (point)
                            'action (lambda (_) (forj-context-remove title))
                            'help-echo "Remove this from the context"
                            'follow-link t))
        (insert (format " %s  %s bytes, ≈%s tokens%s\n"
                        title (plist-get item :bytes)
                        (forj-usage-format-tokens (forj-usage-tokens-of-bytes (plist-get item :bytes)))
                        (if (plist-get item :truncated) " (cut)" "")))))
    (insert "\n")))

(defun forj-chat--context-bounds ()
  "The start and end of the drawn context list, or nil."
  (let ((start (text-property-any (point-min) (point-max) 'forj-context-list t)))
    (and start (cons start (or (next-single-property-change start 'forj-context-list) (point-max))))))

(defun forj-chat--context-position ()
  "Return the position of the context list: after the chat's first line."
  (save-excursion
    (goto-char (point-min))
    (if (looking-at "<!-- forj-chat ") (line-beginning-position 2) (point-min))))

(defun forj-chat--draw-context ()
  "Draw this chat's context list at its top, or take it away when empty."
  (when (markerp forj-chat--out)
    (let ((inhibit-read-only t)
          (bounds (forj-chat--context-bounds)))
      (save-excursion
        (when bounds (delete-region (car bounds) (cdr bounds)))
        (when forj-context-items
          (goto-char (forj-chat--context-position))
          (let ((from (point)))
            (forj-chat--insert-context)
            (add-text-properties from (point) '(forj-context-list t forj-rendered t))
            (forj-chat--seal from (point))))))))

;;; History

(defconst forj-chat--history-why
  "This is the chat's history, kept as the model read it; type below the last \"## User\" heading, or fork from an earlier message with M-x forj-edit-message"
  "Why the history does not change.")

(autoload 'forj-menu "forj-menu" nil t)

(defvar forj-chat-history-map
  (let ((map (make-sparse-keymap)))
    (dolist (command '(self-insert-command yank yank-pop newline open-line newline-and-indent
                       electric-newline-and-maybe-indent delete-char delete-forward-char
                       delete-backward-char backward-delete-char-untabify kill-line kill-word
                       backward-kill-word kill-region transpose-chars transpose-words
                       quoted-insert upcase-word downcase-word capitalize-word just-one-space
                       delete-horizontal-space fill-paragraph indent-for-tab-command
                       mouse-yank-primary mouse-yank-at-click))
      (define-key map (vector 'remap command) #'forj-chat-history-refuse))
    (define-key map (kbd "RET") #'forj-chat-history-ret)
    (define-key map (kbd "TAB") #'forj-chat-history-tab)
    (define-key map [mouse-2] #'forj-chat-history-mouse)
    (define-key map [follow-link] 'mouse-face)
    (define-key map (kbd "n") #'forj-chat-next-turn)
    (define-key map (kbd "p") #'forj-chat-previous-turn)
    (define-key map (kbd "?") #'forj-menu)
    map)
  "Keymap of the chat's read-only history (a text property there).
Typing, yanking and deleting say why nothing changes; `RET' and the
mouse follow links; `TAB' shows or hides a folded result or call.")

(defun forj-chat--seal (beg end)
  "Make BEG..END read-only history, with its keymap."
  (when (< beg end)
    (with-silent-modifications
      (add-text-properties beg end (list 'read-only forj-chat--history-why
                                         'front-sticky '(read-only keymap)
                                         'rear-nonsticky t
                                         'keymap forj-chat-history-map)))))

(defun forj-chat-history-refuse ()
  "Say why the history does not change."
  (interactive)
  (message "forj: %s" forj-chat--history-why))

(defun forj-chat-history-ret ()
  "Follow the link at point; elsewhere in the history, say why the text stays."
  (interactive)
  (if (button-at (point))
      (push-button (point))
    (forj-chat-history-refuse)))

(defun forj-chat-history-tab ()
  "Show or hide the folded result or call at point."
  (interactive)
  (unless (forj-render-toggle-fold)
    (message "forj: nothing folded here; %s" forj-chat--history-why)))

(defun forj-chat-history-mouse (event)
  "Follow the link clicked with EVENT; elsewhere, say why the text stays."
  (interactive "e")
  (let ((pos (posn-point (event-start event))))
    (if (and pos (button-at pos))
        (push-button event)
      (forj-chat-history-refuse))))

;;; Turns

(defun forj-chat--headings ()
  "The start of every role heading of the view, in order."
  (let ((pos (point-min)) (found nil))
    (while (setq pos (text-property-not-all pos (point-max) 'forj-heading nil))
      (push pos found)
      (setq pos (or (next-single-property-change pos 'forj-heading) (point-max))))
    (nreverse found)))

(defun forj-chat-next-turn (&optional n)
  "Move to the start of the Nth next section of the chat (a role heading)."
  (interactive "p")
  (let* ((n (or n 1))
         (here (line-end-position))
         (later (cl-remove-if-not (lambda (p) (> p here)) (forj-chat--headings))))
    (if (< n 0)
        (forj-chat-previous-turn (- n))
      (if (null later)
          (message "forj: no later turn")
        (goto-char (nth (min (1- (max n 1)) (1- (length later))) later))))))

(defun forj-chat-previous-turn (&optional n)
  "Move to the start of the Nth previous section of the chat (a role heading)."
  (interactive "p")
  (let* ((n (or n 1))
         (here (line-beginning-position))
         (earlier (reverse (cl-remove-if-not (lambda (p) (< p here)) (forj-chat--headings)))))
    (if (null earlier)
        (message "forj: no earlier turn")
      (goto-char (nth (min (1- (max n 1)) (1- (length earlier))) earlier)))))

(define-key forj-chat-mode-map (kbd "C-c C-n") #'forj-chat-next-turn)
(define-key forj-chat-mode-map (kbd "C-c C-p") #'forj-chat-previous-turn)

(defun forj-chat--section-summary (heading)
  "Sum up in a few words the section under the HEADING at point.
Tool results are summed up by the tools they answer."
  (let* ((entry (get-text-property (point) 'forj-entry))
         (summary
          (if (and (equal heading "## Tool results") (equal (plist-get entry :role) "tool"))
              (let ((text (plist-get entry :text)))
                (with-temp-buffer
                  (insert text)
                  (string-join
                   (delete-dups
                    (delq nil (mapcar (lambda (block)
                                        (let ((name (ignore-errors
                                                      (plist-get (forj-tools-json-decode block) :name))))
                                          (and (stringp name) (not (string-empty-p name)) name)))
                                      (forj-session-blocks (point-min) (point-max) "tool-result"))))
                   ", ")))
            (save-excursion
              (forward-line 1)
              (skip-chars-forward " \t\n")
              (buffer-substring-no-properties (point) (line-end-position))))))
    (truncate-string-to-width (string-trim summary) 50 nil nil "…")))

(defun forj-chat--imenu-index ()
  "An imenu index of the chat: one entry per turn, its sections inside."
  (let ((turns nil) (current nil) (count 0))
    (save-excursion
      (dolist (pos (forj-chat--headings))
        (goto-char pos)
        (let* ((heading (buffer-substring-no-properties pos (line-end-position)))
               (role (string-remove-prefix "## " heading))
               (summary (forj-chat--section-summary heading))
               (item (cons (format "%s: %s" role summary) pos)))
          (cond
           ((and (equal role "User") (>= pos forj-chat--out))
            (when current (push (cons (car current) (nreverse (cdr current))) turns))
            (setq current nil)
            (push (cons "Your next message" pos) turns))
           ((equal role "User")
            (when current (push (cons (car current) (nreverse (cdr current))) turns))
            (cl-incf count)
            (setq current (list (format "%d. %s" count summary) item)))
           (current (push item (cdr current)))
           (t (push item turns))))))
    (when current (push (cons (car current) (nreverse (cdr current))) turns))
    (nreverse turns)))

(defun forj-chat--outline-level ()
  "Return 1 for a user heading (a turn begins), 2 for replies and results."
  (if (looking-at "## User") 1 2))

;;; Forking

(defun forj-edit-message (&optional pos)
  "Fork the conversation from your earlier message at POS (default: point).
The record is cut just before that message: it and everything after it
\(the model's replies, tool results, your later messages) leave the
chat, and its text comes back in the input, to edit and send again
with \\[forj-chat-send].  Files that tools changed meanwhile stay as
they are: forking changes the conversation, not the project.  A draft
you had in the input goes to the kill ring."
  (interactive)
  (unless (derived-mode-p 'forj-chat-mode) (user-error "Not in a forj chat"))
  (unless (eq (forj-session-state forj-session) 'idle)
    (user-error "A reply is still under way; stop it first"))
  (let* ((entry (get-text-property (or pos (point)) 'forj-entry))
         (index (and entry (cl-position entry (forj-session-record forj-session)))))
    (unless (and index (equal (plist-get entry :role) "user"))
      (user-error "Put point on one of your earlier messages (under a \"## User\" heading)"))
    (when (and (called-interactively-p 'any)
               (not (y-or-n-p (format "Fork from this message (it and the %d entries after it leave the chat)? "
                                      (- (length (forj-session-record forj-session)) index 1)))))
      (user-error "Not forked"))
    (let ((draft (forj-chat--input-text))
          (text (string-trim (forj-session-unescape (cdr (forj-session-split-heading (plist-get entry :text)))))))
      (unless (string-blank-p draft)
        (kill-new draft)
        (message "forj: your draft is in the kill ring"))
      (forj-session-cut-record index text)
      (goto-char (point-max)))))

;;; Saving

(defun forj-save (&optional file)
  "Save this chat to FILE.
FILE defaults to the chat's file, or a new one in `forj-chat-directory'.
Visiting the file later opens it as a chat again."
  (interactive)
  (unless (derived-mode-p 'forj-chat-mode) (user-error "Not in a forj chat"))
  (let ((change-major-mode-with-file-name nil))
    (forj-chat--save-to file))
  (message "forj: chat saved to %s" (abbreviate-file-name buffer-file-name)))

(defun forj-chat--save-to (file)
  "Save the chat to FILE, its own file, or a new file in `forj-chat-directory'."
  (cond
   (file (write-file file))
   (buffer-file-name (save-buffer))
   (t (make-directory forj-chat-directory t)
      (write-file (expand-file-name
                   (format "%s-%s.md"
                           (file-name-nondirectory (directory-file-name (forj-session-root forj-session)))
                           (format-time-string "%Y%m%d-%H%M%S"))
                   forj-chat-directory)))))

(defun forj-chat--write ()
  "Write the chat's transcript and input to its file.
For `write-contents-functions': the file holds the record, not the view."
  (let ((text (concat (forj-session-transcript) "\n## User\n\n" (forj-chat--input-text)))
        (coding-system-for-write 'utf-8-unix))
    (write-region text nil buffer-file-name nil t)
    t))

(defun forj-chat--revert (&rest _)
  "Read the chat's file again: record and view."
  (unless buffer-file-name (user-error "This chat has no file"))
  (let ((inhibit-read-only t))
    (setf (forj-session-record forj-session) nil)
    (set-marker forj-chat--input nil)
    (erase-buffer)
    (insert-file-contents buffer-file-name t nil nil t)
    (forj-chat-mode)
    (set-buffer-modified-p nil)))

(provide 'forj-chat)
;;; forj-chat.el ends here
